"""The three tensor encodings the tiny model uses (F32, F16, Q8_0), in numpy, plus a minimal
GGUF reader so evaluate.py scores the weights exactly as they were written, not the float
training weights.

Q8_0 follows llama.cpp's reference quantizer: per block of 32 values d = max|x| / 127 (float32),
q = round_half_away_from_zero(x * (1/d)) as int8, and the block stores d as fp16 followed by the
32 int8s (34 bytes). Dequantization is fp16(d) * q.
"""
import struct

import numpy as np

TYPE_ID = {"F32": 0, "F16": 1, "Q8_0": 8}
TYPE_NAME = {v: k for k, v in TYPE_ID.items()}
Q8_0_BLOCK = 32
Q8_0_BYTES = 34


def quantize_q8_0(x):
    """x: float32 array whose last axis is a multiple of 32 -> raw Q8_0 bytes (row-major)."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, Q8_0_BLOCK)
    amax = np.abs(x).max(axis=1)
    d = (amax / np.float32(127.0)).astype(np.float32)
    inv = np.zeros_like(d)
    nz = d != 0
    inv[nz] = np.float32(1.0) / d[nz]
    v = x * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
    out = np.empty((x.shape[0], Q8_0_BYTES), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def dequantize_q8_0(raw, shape):
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, Q8_0_BYTES)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(shape)


def encode(x, type_name):
    if type_name == "F32":
        return np.ascontiguousarray(x, dtype=np.float32).tobytes()
    if type_name == "F16":
        return np.ascontiguousarray(x, dtype=np.float16).tobytes()
    if type_name == "Q8_0":
        return quantize_q8_0(x)
    raise ValueError(type_name)


def decode(raw, type_name, shape):
    if type_name == "F32":
        return np.frombuffer(raw, dtype=np.float32).reshape(shape).copy()
    if type_name == "F16":
        return np.frombuffer(raw, dtype=np.float16).reshape(shape).astype(np.float32)
    if type_name == "Q8_0":
        return dequantize_q8_0(raw, shape)
    raise ValueError(type_name)


def nbytes(type_name, n):
    return {"F32": 4 * n, "F16": 2 * n, "Q8_0": n // Q8_0_BLOCK * Q8_0_BYTES}[type_name]


_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_gguf(path):
    """-> (metadata dict, {name: float32 numpy array in numpy order})."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(_SCALAR[t])

    if buf[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        infos.append((name, dims, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    data_start = (pos + align - 1) // align * align
    tensors = {}
    for name, dims, t, off in infos:
        tname = TYPE_NAME[t]
        n = int(np.prod(dims))
        start = data_start + off
        tensors[name] = decode(buf[start:start + nbytes(tname, n)], tname, tuple(reversed(dims)))
    return meta, tensors
