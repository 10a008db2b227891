// deltaserve chat page. Talks to the daemon's own OpenAI-compatible API (same origin):
// GET /v1/models for the model id, POST /v1/chat/completions with stream: true, read with
// fetch + ReadableStream and parsed as server-sent events. Stop aborts the fetch, which
// closes the connection; the daemon cancels the request and frees its slot.
//
// Speed: tokens are counted per content chunk while streaming (a chunk can carry several
// tokens when drafts are accepted), then replaced by usage.completion_tokens from the final
// usage chunk. The decode rate is (tokens - 1) / (last token time - first token time).
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const ui = {
    model: $('model'), speed: $('speed'), status: $('status'), clear: $('clear'),
    system: $('system'), maxTokens: $('max-tokens'), temperature: $('temperature'), apiKey: $('api-key'),
    conversation: $('conversation'), composer: $('composer'), prompt: $('prompt'),
    send: $('send'), stop: $('stop'),
  };

  let modelId = null;
  let history = [];      // [{role, content}] sent with every request
  let controller = null; // AbortController of the reply being streamed
  let epoch = 0;         // bumped by "New chat", so a reply cut off by it is not kept

  function headers() {
    const h = { 'Content-Type': 'application/json' };
    const key = ui.apiKey.value.trim();
    if (key) h.Authorization = `Bearer ${key}`;
    return h;
  }

  function setStatus(text, kind = '') {
    ui.status.textContent = text;
    ui.status.className = `meta ${kind}`;
  }

  function setBusy(busy) {
    ui.send.disabled = busy;
    ui.stop.disabled = !busy;
    ui.prompt.readOnly = busy;
  }

  async function errorText(res) {
    try {
      const body = await res.json();
      if (body && body.error && body.error.message) return body.error.message;
    } catch (_) { /* not JSON */ }
    return `HTTP ${res.status}`;
  }

  async function loadModel() {
    try {
      const res = await fetch('/v1/models', { headers: headers() });
      if (res.status === 401) {
        ui.model.textContent = '(API key needed)';
        document.getElementById('settings').open = true;
        setStatus('enter the API key in Settings', 'error');
        return;
      }
      if (!res.ok) throw new Error(await errorText(res));
      const body = await res.json();
      modelId = body.data && body.data.length ? body.data[0].id : null;
      ui.model.textContent = modelId || '(none)';
      setStatus('ready', 'ok');
    } catch (e) {
      ui.model.textContent = '(unavailable)';
      setStatus(`cannot reach the server: ${e.message}`, 'error');
    }
  }

  function addMessage(role, text) {
    const box = document.createElement('div');
    box.className = `msg ${role}`;
    box.dataset.role = role;
    const who = document.createElement('div');
    who.className = 'who';
    who.textContent = role === 'user' ? 'You' : (modelId || 'assistant');
    const body = document.createElement('div');
    body.className = 'text';
    body.textContent = text;
    box.append(who, body);
    ui.conversation.append(box);
    box.scrollIntoView({ block: 'end' });
    return box;
  }

  // The reply's view: thinking (collapsed) above the answer, a stats line below.
  function replyView(box) {
    const thinking = document.createElement('details');
    thinking.className = 'thinking';
    thinking.hidden = true;
    const summary = document.createElement('summary');
    summary.textContent = 'thinking';
    const thinkingText = document.createElement('div');
    thinking.append(summary, thinkingText);
    const stats = document.createElement('div');
    stats.className = 'stats';
    box.insertBefore(thinking, box.querySelector('.text'));
    box.append(stats);
    return { text: box.querySelector('.text'), thinking, thinkingText, stats };
  }

  function formatStats(s, now) {
    const parts = [];
    if (s.firstAt !== null) parts.push(`TTFT ${Math.round(s.firstAt - s.startAt)} ms`);
    parts.push(`${s.tokens} tokens`);
    const rate = decodeRate(s, now);
    if (rate !== null) parts.push(`${rate.toFixed(1)} tok/s`);
    return parts.join(' · ');
  }

  function decodeRate(s, now) {
    const end = s.lastAt !== null ? s.lastAt : now;
    if (s.firstAt === null || s.tokens < 2 || end <= s.firstAt) return null;
    return ((s.tokens - 1) * 1000) / (end - s.firstAt);
  }

  function showSpeed(s) {
    const rate = decodeRate(s, performance.now());
    ui.speed.textContent = rate === null ? '– tok/s' : `${rate.toFixed(1)} tok/s`;
  }

  // Applies one parsed SSE payload; returns true at the end of the stream.
  function onEvent(data, view, s) {
    if (data === '[DONE]') return true;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message || 'stream error');
    if (chunk.usage && typeof chunk.usage.completion_tokens === 'number') {
      s.tokens = chunk.usage.completion_tokens;
      s.exact = true;
    }
    for (const choice of chunk.choices || []) {
      const delta = choice.delta || {};
      const thought = delta.reasoning_content || delta.reasoning || '';
      const text = delta.content || '';
      if (thought || text) {
        const now = performance.now();
        if (s.firstAt === null) s.firstAt = now;
        s.lastAt = now;
        if (!s.exact) s.tokens += 1;
      }
      if (thought) {
        view.thinking.hidden = false;
        view.thinkingText.textContent += thought;
      }
      if (text) {
        view.text.textContent += text;
        s.content += text;
      }
      if (choice.finish_reason) s.finishReason = choice.finish_reason;
    }
    return false;
  }

  // Reads the SSE body; events are separated by a blank line, payloads start with "data:".
  async function readStream(res, view, s) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = event.split('\n').filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
        if (!data) continue;  // a comment (keep-alive ping)
        if (onEvent(data, view, s)) return;
        view.stats.textContent = formatStats(s, performance.now());
        showSpeed(s);
      }
    }
  }

  function requestBody() {
    const messages = [];
    const system = ui.system.value.trim();
    if (system) messages.push({ role: 'system', content: system });
    messages.push(...history);
    const body = { model: modelId, messages, stream: true, stream_options: { include_usage: true } };
    const maxTokens = parseInt(ui.maxTokens.value, 10);
    if (maxTokens > 0) body.max_tokens = maxTokens;
    const temperature = parseFloat(ui.temperature.value);
    if (!Number.isNaN(temperature)) body.temperature = temperature;
    return body;
  }

  async function send(text) {
    history.push({ role: 'user', content: text });
    addMessage('user', text);
    const box = addMessage('assistant', '');
    box.classList.add('streaming');
    const view = replyView(box);
    const myEpoch = epoch;
    const s = { startAt: performance.now(), firstAt: null, lastAt: null, tokens: 0, exact: false,
                content: '', finishReason: null };
    controller = new AbortController();
    setBusy(true);
    setStatus('generating…', 'busy');
    let outcome = 'done';
    try {
      const res = await fetch('/v1/chat/completions', {
        method: 'POST', headers: headers(), body: JSON.stringify(requestBody()), signal: controller.signal,
      });
      if (!res.ok) throw new Error(await errorText(res));
      await readStream(res, view, s);
      if (s.finishReason === 'length') outcome = 'length';
    } catch (e) {
      if (e.name === 'AbortError') {
        outcome = 'stopped';
      } else {
        outcome = 'error';
        const err = document.createElement('div');
        err.className = 'error';
        err.textContent = e.message;
        box.append(err);
      }
    } finally {
      controller = null;
      box.classList.remove('streaming');
      box.dataset.outcome = outcome;
      // A stopped reply stays in the conversation as far as it got; a reply that produced
      // nothing takes its question out of the history, so the roles keep alternating.
      if (myEpoch === epoch) {
        if (s.content) history.push({ role: 'assistant', content: s.content });
        else history.pop();
      }
      view.stats.textContent = formatStats(s, performance.now()) +
        (outcome === 'done' ? '' : ` · ${outcome}`);
      showSpeed(s);
      setStatus(outcome === 'error' ? 'error' : outcome === 'stopped' ? 'stopped' : 'ready',
                outcome === 'error' ? 'error' : 'ok');
      setBusy(false);
      ui.prompt.focus();
    }
  }

  ui.composer.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = ui.prompt.value.trim();
    if (!text || controller) return;
    ui.prompt.value = '';
    send(text);
  });
  ui.prompt.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      ui.composer.requestSubmit();
    }
  });
  ui.stop.addEventListener('click', () => { if (controller) controller.abort(); });
  ui.clear.addEventListener('click', () => {
    if (controller) controller.abort();
    epoch += 1;
    history = [];
    ui.conversation.replaceChildren();
    ui.speed.textContent = '– tok/s';
  });
  ui.apiKey.addEventListener('change', loadModel);

  loadModel();
})();
