// The web page at / in headless Chromium (Debian's), driven by puppeteer-core, against a real
// `sluice serve` whose experts stream under a small cache (tests/e2e/serve_web_test.cpp starts it;
// scripts/web-screenshots too). Checks: the API-key prompt; a message streams, the heat map
// updates while it does, Stop ends it; after a reload the conversation is still there; model
// output holding <img onerror> and a javascript: link (the real model, held to a GBNF grammar
// set in the page's advanced settings) runs nothing. Prints "ok   <check>" or "FAIL <check>: why"
// per check. Usage: node web_page.mjs URL API_KEY SCREENSHOT_DIR [CHROMIUM]
import { mkdirSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

const [url, key, shots, chromium = '/usr/bin/chromium'] = process.argv.slice(2);
mkdirSync(shots, { recursive: true });
let failed = 0;
const check = (name, ok, why = '') => {
  console.log(ok ? `ok   ${name}` : `FAIL ${name}: ${why}`);
  if (!ok) failed++;
};

const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1440, height: 900 });
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('dialog', (d) => { pageErrors.push('dialog opened: ' + d.message()); d.dismiss(); });

  // The page is served without the key; its first /engine poll gets a 401 and asks for it.
  await page.goto(url, { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('#key-dialog[open]', { timeout: 10000 });
  check('the page asks for the API key', true);
  await page.type('#key-input', key);
  await page.click('#key-save');
  await page.waitForFunction(() => Number(document.getElementById('heat').dataset.polls || 0) > 0, { timeout: 10000 });
  check('the engine panel shows the server after the key', true);

  const setField = (id, value) => page.evaluate((id, value) => {
    const el = document.getElementById(id);
    if (el.type === 'checkbox') el.checked = value; else el.value = value;
    el.dispatchEvent(new Event('change'));
  }, id, value);
  await setField('s-max_tokens', '1800');
  await setField('s-ignore_eos', true);  // the reply runs until Stop (or 1,800 tokens: the server's -c 2048)
  await setField('s-temperature', '0.7');

  // A streamed reply: the text grows while Stop is enabled, and the heat map follows the run.
  const heat = () => page.evaluate(() => {
    const c = document.getElementById('heat');
    return { requests: Number(c.dataset.requests), polls: Number(c.dataset.polls), pixels: c.toDataURL() };
  });
  const before = await heat();
  await page.type('#input', 'And God said');
  await page.click('#send');
  const replyText = () => page.evaluate(() => {
    const all = document.querySelectorAll('.message.assistant .content');
    return all.length ? all[all.length - 1].textContent : '';
  });
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('.message.assistant .content');
    return all.length && all[all.length - 1].textContent.length > 0;
  }, { timeout: 20000 });
  const early = await replyText();
  await page.waitForFunction((n) => {
    const all = document.querySelectorAll('.message.assistant .content');
    return all[all.length - 1].textContent.length > n + 20;
  }, { timeout: 20000 }, early.length);
  const later = await replyText();
  const streaming = await page.evaluate(() => !document.getElementById('stop').disabled);
  check('the reply streams (text grows while Stop is enabled)', streaming && later.startsWith(early.slice(0, 1)) && later.length > early.length,
    `early ${JSON.stringify(early)}, later ${JSON.stringify(later)}, stop enabled ${streaming}`);
  await page.waitForFunction((b) => {
    const c = document.getElementById('heat');
    return Number(c.dataset.polls) >= b.polls + 2 && Number(c.dataset.requests) > b.requests;
  }, { timeout: 20000 }, before);
  const during = await heat();
  const stillStreaming = await page.evaluate(() => !document.getElementById('stop').disabled);
  check('the heat map updates while the streamed model generates',
    stillStreaming && during.requests > before.requests && during.pixels !== before.pixels,
    `requests ${before.requests} -> ${during.requests}, pixels changed ${during.pixels !== before.pixels}, streaming ${stillStreaming}`);
  const misses = await page.evaluate(() => Number(document.getElementById('heat').dataset.misses));
  check('experts are read from disk during the run (cache misses)', misses > 0, `misses ${misses}`);
  // A few more polls, so the charts have a history in the screenshot.
  await page.waitForFunction((b) => Number(document.getElementById('heat').dataset.polls) >= b.polls + 6, { timeout: 20000 }, before);
  await page.screenshot({ path: `${shots}/web-heatmap.png` });

  await page.click('#stop');
  await page.waitForFunction(() => document.getElementById('stop').disabled && !document.getElementById('send').disabled, { timeout: 10000 });
  const stopped = await replyText();
  const meta = await page.evaluate(() => {
    const all = document.querySelectorAll('.message.assistant .meta');
    return all.length ? all[all.length - 1].textContent : '';
  });
  await new Promise((r) => setTimeout(r, 700));
  check('Stop ends the reply', meta === 'stopped' && (await replyText()) === stopped, `meta ${JSON.stringify(meta)}`);
  const polled = await page.evaluate(() => Number(document.getElementById('heat').dataset.polls));
  await page.waitForFunction((n) => Number(document.getElementById('heat').dataset.polls) > n, { timeout: 10000 }, polled);
  await page.screenshot({ path: `${shots}/web-chat.png` });

  // After a reload the conversation is there, as it was when stopped.
  await page.reload({ waitUntil: 'domcontentloaded' });
  await page.waitForSelector('#conversation-list li');
  const restored = await page.evaluate(() => ({
    title: document.querySelector('#conversation-list li.current span').textContent,
    user: document.querySelector('.message.user').textContent,
    reply: document.querySelector('.message.assistant .content').textContent,
  }));
  check('a reload finds the conversation', restored.title === 'And God said' && restored.user === 'And God said' && restored.reply === stopped,
    JSON.stringify(restored));

  // Hostile model output: the grammar makes the real model write an <img onerror> and a
  // javascript: link; neither may run, and the raw reply shows the model did write them.
  const hostile = '<img src=x onerror="window.pwned=1"> see [the link](javascript:window.pwned=2) now';
  await page.click('#new-chat');
  await setField('s-ignore_eos', false);
  await setField('s-max_tokens', '200');
  await setField('s-grammar', `root ::= "${hostile.replaceAll('"', '\\"')}"`);
  await page.type('#input', 'Show me a picture');
  await page.click('#send');
  await page.waitForFunction(() => !document.getElementById('send').disabled && document.querySelectorAll('.message.assistant').length === 1,
    { timeout: 30000 });
  const raw = await page.evaluate(() => {
    const c = JSON.parse(localStorage.getItem('sluice.conversations'))[0];
    return c.messages[c.messages.length - 1].content;
  });
  check('the model wrote the hostile text', raw === hostile, JSON.stringify(raw));
  const links = await page.evaluate(() => [...document.querySelectorAll('.message.assistant a')].map((a) => a.getAttribute('href')));
  const imgs = await page.evaluate(() => document.querySelectorAll('#messages img').length);
  const linkText = await page.evaluate(() => [...document.querySelectorAll('.message.assistant a')].map((a) => a.textContent).join());
  if (linkText.includes('the link')) await page.click('.message.assistant a');
  await new Promise((r) => setTimeout(r, 500));
  const pwned = await page.evaluate(() => window.pwned);
  check('no <img> from model output reaches the page', imgs === 0, `${imgs} img elements`);
  check('no javascript: link from model output', links.every((h) => h === null || !/^\s*javascript:/i.test(h)), JSON.stringify(links));
  check('nothing from model output ran', pwned === undefined, `window.pwned = ${pwned}`);
  check('no page errors or dialogs', pageErrors.length === 0, pageErrors.join('; '));
} catch (e) {
  check('the run', false, e.stack || String(e));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
