#!/usr/bin/env python3
"""A Hugging Face hub in miniature for sluice's hub tests: serves ROOT/ORG/NAME/... on 127.0.0.1.

Routes, shaped as the hub answers them:
  GET  /api/models/ORG/NAME/tree/REV?recursive=true  the file listing (size, lfs.oid = sha256)
  HEAD|GET /ORG/NAME/resolve/REV/PATH  302 to /cdn/ORG/NAME/PATH with X-Repo-Commit,
                                       X-Linked-Etag (the sha256) and X-Linked-Size
  HEAD|GET /cdn/ORG/NAME/PATH          the bytes, with Range (206, Content-Range)
  GET  /_stats                         body bytes served from /cdn and the request count per route
Options: --token T (401 on /api and /resolve without "Authorization: Bearer T"), --cut SUBSTR
(the first GET of a matching file sends half its body and drops the connection), --bad-etag
SUBSTR (matching files are announced with a wrong sha256), --page N (listings in pages of N with
a Link header to the next). Prints the port on stdout.
"""
import argparse
import hashlib
import json
import os
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Hub:
    def __init__(self, args):
        self.root = os.path.abspath(args.root)
        self.token = args.token
        self.cut = args.cut
        self.bad_etag = args.bad_etag
        self.page = args.page
        self.lock = threading.Lock()
        self.shas = {}
        self.cut_done = set()
        self.bytes = 0
        self.counts = {}

    def sha(self, path):
        with self.lock:
            if path in self.shas:
                return self.shas[path]
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        digest = h.hexdigest()
        if self.bad_etag and self.bad_etag in path:
            digest = hashlib.sha256(digest.encode()).hexdigest()
        with self.lock:
            self.shas[path] = digest
        return digest

    def count(self, route, n=0):
        with self.lock:
            self.counts[route] = self.counts.get(route, 0) + 1
            self.bytes += n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None

    def log_message(self, *args):
        pass

    def send_body(self, code, body, ctype="application/json", extra=None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def authorized(self):
        if not self.hub.token:
            return True
        if self.headers.get("Authorization") == "Bearer " + self.hub.token:
            return True
        self.send_body(401, json.dumps({"error": "Invalid credentials in Authorization header"}))
        return False

    def local(self, repo, path):
        full = os.path.normpath(os.path.join(self.hub.root, repo, path))
        if not full.startswith(self.hub.root + os.sep) or not os.path.isfile(full):
            return None
        return full

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = self.path.split("?", 1)[0]
        parts = url.strip("/").split("/")
        if url == "/_stats":
            with self.hub.lock:
                return self.send_body(200, json.dumps({"bytes": self.hub.bytes, "counts": self.hub.counts}))
        if len(parts) >= 5 and parts[:2] == ["api", "models"] and parts[4] == "tree":
            self.hub.count("tree")
            if not self.authorized():
                return
            repo_dir = os.path.join(self.hub.root, parts[2], parts[3])
            if not os.path.isdir(repo_dir):
                return self.send_body(404, json.dumps({"error": "Repository not found"}))
            out = []
            for d, _, files in os.walk(repo_dir):
                for name in sorted(files):
                    full = os.path.join(d, name)
                    rel = os.path.relpath(full, repo_dir)
                    size = os.path.getsize(full)
                    out.append({"type": "file", "oid": "0" * 40, "size": size, "path": rel,
                                "lfs": {"oid": self.hub.sha(full), "size": size, "pointerSize": 134}})
            # Pages of --page entries, the next one named in a Link header (as the hub does).
            extra = {}
            if self.hub.page:
                query = self.path.split("?", 1)[1] if "?" in self.path else ""
                cursor = int(dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("cursor", "0"))
                if cursor + self.hub.page < len(out):
                    extra["Link"] = '<%s/api/models/%s/%s/tree/%s?recursive=true&cursor=%d>; rel="next"' % (
                        "http://" + self.headers["Host"], parts[2], parts[3], parts[5], cursor + self.hub.page)
                out = out[cursor:cursor + self.hub.page]
            return self.send_body(200, json.dumps(out), extra=extra)
        if len(parts) >= 5 and parts[2] == "resolve":
            self.hub.count("resolve")
            if not self.authorized():
                return
            repo, path = parts[0] + "/" + parts[1], "/".join(parts[4:])
            full = self.local(repo, path)
            if not full:
                return self.send_body(404, json.dumps({"error": "Entry not found"}),
                                      extra={"X-Error-Code": "EntryNotFound"})
            sha = self.hub.sha(full)
            return self.send_body(302, "", "text/plain", {
                "Location": "/cdn/" + repo + "/" + path, "X-Repo-Commit": COMMIT,
                "X-Linked-Etag": '"' + sha + '"', "X-Linked-Size": str(os.path.getsize(full)),
                "ETag": '"' + sha + '"'})
        if len(parts) >= 4 and parts[0] == "cdn":
            full = self.local(parts[1] + "/" + parts[2], "/".join(parts[3:]))
            if not full:
                return self.send_body(404, "not found", "text/plain")
            return self.serve_file(full)
        self.send_body(404, json.dumps({"error": "no route"}))

    def serve_file(self, full):
        size = os.path.getsize(full)
        first, last = 0, size - 1
        rng = self.headers.get("Range")
        code = 200
        if rng and rng.startswith("bytes="):
            a, b = rng[6:].split("-", 1)
            first = int(a) if a else 0
            last = min(int(b), size - 1) if b else size - 1
            if first >= size:
                return self.send_body(416, "", "text/plain", {"Content-Range": "bytes */%d" % size})
            code = 206
        n = last - first + 1
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.send_header("Accept-Ranges", "bytes")
        if code == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, size))
        self.end_headers()
        if self.command == "HEAD":
            return
        cut = False
        if self.hub.cut and self.hub.cut in full:
            with self.hub.lock:
                cut = full not in self.hub.cut_done
                self.hub.cut_done.add(full)
        limit = n // 2 if cut else n
        sent = 0
        with open(full, "rb") as f:
            f.seek(first)
            while sent < limit:
                block = f.read(min(1 << 20, limit - sent))
                if not block:
                    break
                try:
                    self.wfile.write(block)
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += len(block)
        self.hub.count("cdn", sent)
        if cut:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--token", default="")
    ap.add_argument("--cut", default="")
    ap.add_argument("--bad-etag", default="")
    ap.add_argument("--page", type=int, default=0)
    args = ap.parse_args()
    Handler.hub = Hub(args)
    socketserver.TCPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
