// The tenant console (GET /console): one static page, no build step, every call through the
// public API with a browser token (docs/decisions/0077-browser-tokens.md). Read-only: the tasks,
// their live status from the event stream, each task's transitions and ledger lines, and usage
// or budget where the deployment serves them to the credential.
export const CONSOLE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>vidorch console</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; }
  input { width: 36rem; font: inherit; padding: .3rem; }
  table { border-collapse: collapse; margin-top: 1rem; }
  th, td { border-bottom: 1px solid #ddd; padding: .3rem .6rem; text-align: left; }
  .SUCCEEDED { color: #17803d; } .FAILED { color: #b42318; } .CANCELLED { color: #777; }
  #status { margin-left: .6rem; color: #555; } #detail { margin-top: 1rem; white-space: pre-wrap; font-family: monospace; }
</style>
</head>
<body>
<h1>vidorch console</h1>
<form id="login">
  <label>Browser token <input id="token" type="password" autocomplete="off" placeholder="vbt_… (POST /v1/tokens)"></label>
  <button type="submit">Open</button><span id="status"></span>
</form>
<section id="money" hidden><h2>Usage and budget</h2><pre id="money-body"></pre></section>
<table id="tasks" hidden>
  <thead><tr><th>Task</th><th>Model</th><th>Status</th><th>Reserved</th><th>Settled</th><th>Created</th></tr></thead>
  <tbody></tbody>
</table>
<div id="detail"></div>
<script>
(() => {
  'use strict';
  let token = null;
  let stream = null;
  const $ = (id) => document.getElementById(id);
  const rows = new Map();
  const say = (text) => { $('status').textContent = text; };

  async function api(path) {
    const res = await fetch(path, { headers: { authorization: 'Bearer ' + token } });
    const body = res.headers.get('content-type')?.includes('json') ? await res.json() : null;
    if (!res.ok) throw new Error(res.status + ' ' + (body?.detail ?? body?.title ?? res.statusText));
    return body;
  }

  function cell(text, cls) {
    const td = document.createElement('td');
    td.textContent = text ?? '';
    if (cls) td.className = cls;
    return td;
  }

  function show(task) {
    let tr = rows.get(task.task_id);
    if (!tr) {
      tr = document.createElement('tr');
      tr.dataset.taskId = task.task_id;
      tr.addEventListener('click', () => detail(task.task_id));
      rows.set(task.task_id, tr);
      $('tasks').querySelector('tbody').append(tr);
    }
    tr.replaceChildren(
      cell(task.task_id), cell(task.model), cell(task.status, task.status + ' status'),
      cell(task.reserved_amount), cell(task.settled_amount), cell(task.created_at),
    );
  }

  function setStatus(taskId, status) {
    const tr = rows.get(taskId);
    const td = tr?.querySelector('.status');
    if (td) { td.textContent = status; td.className = status + ' status'; }
  }

  async function detail(taskId) {
    const t = await api('/v1/tasks/' + taskId);
    $('detail').textContent = [
      'task ' + t.task_id + ' ' + t.status,
      'transitions:', ...t.transitions.map((x) => '  ' + x.at + ' ' + (x.from ?? '-') + ' -> ' + x.to + ' (' + x.source_event + ')'),
      'ledger:', ...t.ledger.map((l) => '  ' + l.at + ' ' + l.type + ' ' + l.amount),
    ].join('\\n');
  }

  /** Reads a text/event-stream with fetch (the token stays in a header, never in the URL). */
  async function follow(path) {
    stream?.abort();
    stream = new AbortController();
    const res = await fetch(path, { headers: { authorization: 'Bearer ' + token }, signal: stream.signal });
    if (!res.ok) { say('live events: ' + res.status); return; }
    say('live');
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let end;
      while ((end = buf.indexOf('\\n\\n')) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
        const data = block.split('\\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\\n');
        if (event === 'transition' && data) {
          const t = JSON.parse(data);
          if (!rows.has(t.task_id)) api('/v1/tasks/' + t.task_id).then(show, () => {});
          else setStatus(t.task_id, t.status);
        }
      }
    }
    say('stream ended');
  }

  async function money() {
    const parts = [];
    for (const path of ['/v1/usage', '/v1/budget']) {
      try { parts.push(path + ': ' + JSON.stringify(await api(path), null, 1)); } catch { /* not served to this credential */ }
    }
    $('money').hidden = parts.length === 0;
    $('money-body').textContent = parts.join('\\n');
  }

  $('login').addEventListener('submit', async (e) => {
    e.preventDefault();
    token = $('token').value.trim();
    rows.clear();
    $('tasks').querySelector('tbody').replaceChildren();
    try {
      const page = await api('/v1/tasks?limit=50');
      page.tasks.forEach(show);
      $('tasks').hidden = false;
      say(page.tasks.length + ' tasks');
      money();
      follow('/v1/events').catch((err) => say('live events: ' + err.message));
    } catch (err) {
      say(err.message);
    }
  });
})();
</script>
</body>
</html>
`;
