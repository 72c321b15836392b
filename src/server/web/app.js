// sluice's web page: a chat over /v1/chat/completions (streamed), conversations kept in this
// browser's localStorage, and the engine as it runs from GET /engine (README, "The web page").
// Model output is untrusted: Markdown is rendered by marked, sanitised by DOMPurify into a DOM
// fragment (no innerHTML anywhere), and the server's Content-Security-Policy runs no inline script.
'use strict';

const $ = (id) => document.getElementById(id);
const store = {
  get(key, fallback) {
    try { const v = localStorage.getItem('sluice.' + key); return v === null ? fallback : JSON.parse(v); } catch { return fallback; }
  },
  set(key, value) { localStorage.setItem('sluice.' + key, JSON.stringify(value)); },
};

// ---- settings -------------------------------------------------------------------------------
const DEFAULTS = { system: '', temperature: 0.8, top_p: 0.95, top_k: 40, min_p: 0.05, repeat_penalty: 1,
  max_tokens: 512, seed: '', grammar: '', tools: '', ignore_eos: false };
const settings = Object.assign({}, DEFAULTS, store.get('settings', {}));
for (const name of Object.keys(DEFAULTS)) {
  const el = $('s-' + name);
  if (el.type === 'checkbox') el.checked = !!settings[name]; else el.value = settings[name];
  el.addEventListener('change', () => {
    settings[name] = el.type === 'checkbox' ? el.checked : el.value;
    store.set('settings', settings);
  });
}

// The request body's sampling fields; throws with a message for a field that cannot be sent.
function sampling() {
  const body = {};
  for (const name of ['temperature', 'top_p', 'top_k', 'min_p', 'repeat_penalty', 'max_tokens', 'seed']) {
    const v = String(settings[name]).trim();
    if (v === '') continue;
    const n = Number(v);
    if (!Number.isFinite(n)) throw new Error(`setting ${name}: "${v}" is not a number`);
    body[name] = n;
  }
  if (settings.grammar.trim()) body.grammar = settings.grammar;
  if (settings.tools.trim()) {
    try { body.tools = JSON.parse(settings.tools); } catch (e) { throw new Error('setting tools: ' + e.message); }
  }
  if (settings.ignore_eos) body.ignore_eos = true;
  return body;
}

// ---- API key and requests --------------------------------------------------------------------
let apiKey = store.get('apiKey', '');
function askKey() {
  return new Promise((resolve) => {
    const dlg = $('key-dialog');
    $('key-input').value = apiKey;
    const done = (ok) => {
      if (ok) { apiKey = $('key-input').value.trim(); store.set('apiKey', apiKey); }
      dlg.close();
      resolve(ok);
    };
    $('key-save').onclick = () => done(true);
    $('key-cancel').onclick = () => done(false);
    $('key-input').onkeydown = (e) => { if (e.key === 'Enter') done(true); };
    if (!dlg.open) dlg.showModal();
  });
}
$('key-button').onclick = () => askKey();

// fetch with the key; a 401 asks for the key once and retries.
async function api(path, init = {}) {
  for (let attempt = 0; ; ++attempt) {
    const headers = Object.assign({}, init.headers || {});
    if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
    const res = await fetch(path, Object.assign({}, init, { headers }));
    if (res.status !== 401 || attempt > 0 || !(await askKey())) return res;
  }
}

async function errorText(res) {
  try { const j = await res.json(); return (j.error && j.error.message) || JSON.stringify(j); } catch { return `HTTP ${res.status}`; }
}

// The data: events of a server-sent-event stream, parsed ([DONE] ends it).
async function* sse(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        if (line === 'data: [DONE]') return;
        yield JSON.parse(line.slice(6));
      }
    }
  }
}

// ---- conversations ---------------------------------------------------------------------------
let conversations = store.get('conversations', []);
let current = store.get('current', null);
let model = '';
const save = () => { store.set('conversations', conversations); store.set('current', current); };
const conversation = () => conversations.find((c) => c.id === current);

function newConversation() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', messages: [] };
  conversations.unshift(c);
  current = c.id;
  save();
  render();
  return c;
}

function renderList() {
  const ul = $('conversation-list');
  ul.replaceChildren();
  for (const c of conversations) {
    const li = document.createElement('li');
    if (c.id === current) li.className = 'current';
    const title = document.createElement('span');
    title.textContent = c.title;
    const del = document.createElement('button');
    del.className = 'ghost';
    del.textContent = '×';
    del.title = 'delete';
    del.onclick = (e) => {
      e.stopPropagation();
      if (generating) return;
      conversations = conversations.filter((x) => x.id !== c.id);
      if (current === c.id) current = conversations.length ? conversations[0].id : null;
      save();
      render();
    };
    li.append(title, del);
    li.onclick = () => { if (!generating) { current = c.id; save(); render(); } };
    ul.append(li);
  }
}

// ---- rendering model output ------------------------------------------------------------------
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') { node.setAttribute('target', '_blank'); node.setAttribute('rel', 'noopener noreferrer nofollow'); }
});
const PURIFY = { RETURN_DOM_FRAGMENT: true, FORBID_TAGS: ['img', 'style', 'form', 'input', 'button', 'textarea', 'select', 'svg', 'math'],
  FORBID_ATTR: ['style', 'id', 'class'] };
function markdown(text) { return DOMPurify.sanitize(marked.parse(text, { gfm: true, breaks: true }), PURIFY); }

function messageNode(m) {
  const div = document.createElement('div');
  div.className = 'message ' + m.role + (m.error ? ' error' : '');
  if (m.role === 'user') { div.textContent = m.content; return div; }
  if (m.reasoning) {
    const d = document.createElement('details');
    d.className = 'reasoning';
    const s = document.createElement('summary');
    s.textContent = 'Reasoning';
    const t = document.createElement('div');
    t.textContent = m.reasoning;
    d.append(s, t);
    div.append(d);
  }
  const body = document.createElement('div');
  body.className = 'content';
  if (m.error) body.textContent = m.error; else body.append(markdown(m.content || ''));
  div.append(body);
  for (const tc of m.tool_calls || []) {
    const box = document.createElement('div');
    box.className = 'tool-call';
    const name = document.createElement('strong');
    name.textContent = 'tool call: ' + (tc.function.name || '');
    const args = document.createElement('pre');
    args.textContent = tc.function.arguments || '';
    box.append(name, args);
    div.append(box);
  }
  if (m.meta) {
    const meta = document.createElement('div');
    meta.className = 'meta';
    meta.textContent = m.meta;
    div.append(meta);
  }
  return div;
}

function render() {
  renderList();
  const box = $('messages');
  box.replaceChildren(...(conversation() ? conversation().messages.map(messageNode) : []));
  box.scrollTop = box.scrollHeight;
}

// ---- chat ------------------------------------------------------------------------------------
let generating = null;  // the running generation's AbortController

function setBusy(busy) {
  $('send').disabled = busy;
  $('regenerate').disabled = busy;
  $('stop').disabled = !busy;
  engineInterval(busy ? 400 : 1000);
}

async function generate(c) {
  const reply = { role: 'assistant', content: '', reasoning: '', tool_calls: [] };
  c.messages.push(reply);
  let node = messageNode(reply);
  $('messages').append(node);
  let body;
  try { body = sampling(); } catch (e) { reply.error = e.message; finish(); return; }
  const history = c.messages.slice(0, -1).filter((m) => !m.error).map((m) => {
    const out = { role: m.role, content: m.content };
    if (m.tool_calls && m.tool_calls.length) out.tool_calls = m.tool_calls;
    return out;
  });
  if (settings.system.trim()) history.unshift({ role: 'system', content: settings.system });
  Object.assign(body, { model, messages: history, stream: true, stream_options: { include_usage: true } });
  generating = new AbortController();
  setBusy(true);
  const started = performance.now();
  let first = 0, usage = null, finishReason = '', pending = false, lastSave = 0;
  const redraw = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const fresh = messageNode(reply);
      node.replaceWith(fresh);
      node = fresh;
      const box = $('messages');
      box.scrollTop = box.scrollHeight;
    });
  };
  try {
    const res = await api('/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body), signal: generating.signal });
    if (!res.ok) throw new Error(await errorText(res));
    for await (const ev of sse(res)) {
      if (ev.error) throw new Error(ev.error.message || JSON.stringify(ev.error));
      if (ev.usage) usage = ev.usage;
      const ch = ev.choices && ev.choices[0];
      if (!ch) continue;
      if (ch.finish_reason) finishReason = ch.finish_reason;
      const d = ch.delta || {};
      if (!first && (d.content || d.reasoning_content)) first = performance.now();
      if (d.content) reply.content += d.content;
      if (d.reasoning_content) reply.reasoning += d.reasoning_content;
      for (const t of d.tool_calls || []) {
        const slot = reply.tool_calls[t.index] || (reply.tool_calls[t.index] = { id: t.id, type: 'function', function: { name: '', arguments: '' } });
        if (t.id) slot.id = t.id;
        if (t.function && t.function.name) slot.function.name += t.function.name;
        if (t.function && t.function.arguments) slot.function.arguments += t.function.arguments;
      }
      // Saved as it streams, so a reload mid-reply finds what had arrived.
      if (performance.now() - lastSave > 300) { lastSave = performance.now(); save(); }
      redraw();
    }
    const secs = (performance.now() - (first || started)) / 1000;
    reply.meta = usage ? `${usage.completion_tokens} tokens · ${(usage.completion_tokens / Math.max(secs, 1e-3)).toFixed(1)} tokens/s · ${finishReason}`
      : finishReason;
  } catch (e) {
    if (e.name === 'AbortError') reply.meta = 'stopped';
    else reply.error = e.message;
  }
  finish();

  function finish() {
    if (!reply.tool_calls.length) delete reply.tool_calls;
    if (!reply.reasoning) delete reply.reasoning;
    generating = null;
    setBusy(false);
    save();
    render();
  }
}

function send() {
  const text = $('input').value;
  if (!text.trim() || generating) return;
  const c = conversation() || newConversation();
  if (!c.messages.length) c.title = text.trim().slice(0, 40);
  c.messages.push({ role: 'user', content: text });
  $('input').value = '';
  save();
  render();
  generate(c);
}

$('send').onclick = send;
$('input').addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(); } });
$('stop').onclick = () => { if (generating) generating.abort(); };
$('regenerate').onclick = () => {
  const c = conversation();
  if (!c || generating || !c.messages.length) return;
  if (c.messages[c.messages.length - 1].role === 'assistant') c.messages.pop();
  if (!c.messages.length) return;
  save();
  render();
  generate(c);
};
$('new-chat').onclick = () => { if (!generating) newConversation(); };

// ---- the engine as it runs -------------------------------------------------------------------
const COLORS = { d: '#262d38', r: '#2f6fb3', p: '#8a5cd6', l: '#d99a2b', '-': '#0b0e13', hit: '#3fb950', miss: '#f85149' };
const HISTORY = 120;
const series = { hit: [], disk: [] };
let previous = null, recentHits = null, recentMisses = null, polls = 0, timer = null;

function rate(now, prev, path) {
  const get = (o) => path.split('.').reduce((x, k) => x[k], o);
  return get(now) - get(prev);
}

function drawHeat(cache) {
  const canvas = $('heat');
  const L = cache.n_layer, E = cache.n_expert;
  if (!L || !E) return;
  const cw = Math.max(1, Math.floor(384 / E)), ch = Math.max(3, Math.min(16, Math.floor(240 / L)));
  if (canvas.width !== cw * E || canvas.height !== ch * L) { canvas.width = cw * E; canvas.height = ch * L; }
  const g = canvas.getContext('2d');
  if (!recentHits || recentHits.length !== L * E) { recentHits = new Float32Array(L * E); recentMisses = new Float32Array(L * E); }
  const prev = previous && previous.cache.n_layer === L ? previous.cache : null;
  for (let l = 0; l < L; ++l) {
    for (let e = 0; e < E; ++e) {
      const k = l * E + e;
      // Activity since the last poll, fading over the next few.
      recentHits[k] = recentHits[k] * 0.5 + (prev && cache.hits[l][e] > prev.hits[l][e] ? 1 : 0);
      recentMisses[k] = recentMisses[k] * 0.5 + (prev && cache.misses[l][e] > prev.misses[l][e] ? 1 : 0);
      let color = COLORS[cache.state[l][e]] || COLORS.d;
      if (recentMisses[k] > 0.3) color = COLORS.miss; else if (recentHits[k] > 0.3) color = COLORS.hit;
      g.fillStyle = color;
      g.fillRect(e * cw, l * ch, cw - (cw > 2 ? 1 : 0), ch - 1);
    }
  }
}

function drawChart(id, values, max, color) {
  const canvas = $(id), g = canvas.getContext('2d');
  g.clearRect(0, 0, canvas.width, canvas.height);
  if (values.length < 2) return;
  g.strokeStyle = color;
  g.lineWidth = 1.5;
  g.beginPath();
  const step = canvas.width / (HISTORY - 1), x0 = canvas.width - (values.length - 1) * step;
  values.forEach((v, i) => {
    const y = canvas.height - 2 - (Math.min(v, max) / max) * (canvas.height - 4);
    if (i) g.lineTo(x0 + i * step, y); else g.moveTo(x0, y);
  });
  g.stroke();
}

const fmt = (v, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : '–');

function showEngine(now) {
  $('model').textContent = `${now.model.id} · ${now.model.architecture} · ${now.model.n_layer} layers · ` +
    `${now.model.n_expert} experts (top-${now.model.n_expert_used})`;
  $('engine-mode').textContent = now.model.experts_mode;
  $('g-active').textContent = now.scheduler.active;
  $('g-queue').textContent = now.scheduler.queue_depth;
  if (previous) {
    const dt = now.uptime_seconds - previous.uptime_seconds;
    const tokens = rate(now, previous, 'scheduler.generated_tokens');
    const requests = rate(now, previous, 'experts.requests');
    const hit = requests > 0 ? (100 * rate(now, previous, 'experts.hits')) / requests : NaN;
    const disk = rate(now, previous, 'experts.bytes_read') / 1e6 / dt;
    $('g-tps').textContent = fmt(tokens / dt);
    $('g-hit').textContent = Number.isFinite(hit) ? fmt(hit) + ' %' : '–';
    $('g-disk').textContent = fmt(disk);
    $('g-stall').textContent = tokens > 0 ? fmt((1000 * rate(now, previous, 'experts.stall_seconds')) / tokens, 2) + ' ms' : '–';
    series.hit.push(Number.isFinite(hit) ? hit : series.hit.length ? series.hit[series.hit.length - 1] : 0);
    series.disk.push(disk);
    for (const s of Object.values(series)) if (s.length > HISTORY) s.shift();
    const diskMax = Math.max(1, ...series.disk);
    $('hit-max').textContent = '0–100 %';
    $('disk-max').textContent = `max ${fmt(diskMax)}`;
    drawChart('chart-hit', series.hit, 100, COLORS.hit);
    drawChart('chart-disk', series.disk, diskMax, COLORS.p);
  }
  drawHeat(now.cache);
  const body = $('slots').tBodies[0];
  body.replaceChildren(...now.slots.map((s) => {
    const tr = document.createElement('tr');
    for (const v of [s.id, s.busy ? 'busy' : 'idle', `${s.n_cached} / ${s.n_ctx}`, s.n_prompt, s.n_reused]) {
      const td = document.createElement('td');
      td.textContent = v;
      tr.append(td);
    }
    return tr;
  }));
  const heat = $('heat');
  heat.dataset.polls = ++polls;
  heat.dataset.requests = now.experts.requests;
  heat.dataset.misses = now.experts.misses;
  previous = now;
}

async function pollEngine() {
  try {
    const res = await api('/engine');
    if (!res.ok) throw new Error(await errorText(res));
    const now = await res.json();
    model = now.model.id;
    $('engine-error').hidden = true;
    showEngine(now);
  } catch (e) {
    $('engine-error').hidden = false;
    $('engine-error').textContent = 'engine: ' + e.message;
  }
}

let every = 0;
function engineInterval(ms) {
  if (ms === every) return;
  every = ms;
  clearInterval(timer);
  timer = setInterval(pollEngine, ms);
}

render();
pollEngine().then(() => engineInterval(1000));
