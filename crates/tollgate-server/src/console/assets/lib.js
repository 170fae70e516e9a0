// The console's shared words: the API client (session, CSRF, errors),
// building DOM without innerHTML (names come from callers of the API),
// the live series, the charts, and the confirm step of destructive actions.

/** Who is looking: {role, csrf, auth}. Until the server has /v1/session
 * (older servers), everyone is an admin without auth. */
export const session = { role: 'admin', csrf: null, auth: false };

/** An API error: the server's {"error":{"code","message"}}. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Calls the API; the JSON answer, or throws an ApiError carrying the
 * server's message. */
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && session.csrf) headers['X-CSRF-Token'] = session.csrf;
  let res;
  try {
    res = await fetch(path, {
      method,
      headers,
      credentials: 'same-origin',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, 'network', 'the server did not answer: ' + e.message);
  }
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch (_) {
    json = null;
  }
  // A session that ended (or a server that wants a token): the page asks
  // for one (app.js listens).
  if (res.status === 401 && path !== '/v1/session') window.dispatchEvent(new Event('tollgate-signed-out'));
  if (!res.ok) {
    const err = json && json.error ? json.error : { code: 'http_' + res.status, message: res.statusText || 'request failed' };
    throw new ApiError(res.status, err.code, err.message);
  }
  return json;
}

/** Reads /v1/session: 'ok', or 'login' when the server wants a token. A
 * server without the route (404) has no login: everyone is an admin. */
export async function loadSession() {
  try {
    const s = await api('GET', '/v1/session');
    session.role = s.role || 'admin';
    session.csrf = s.csrf || null;
    session.auth = s.auth !== false;
    return 'ok';
  } catch (e) {
    if (e.status === 404) {
      session.role = 'admin';
      session.csrf = null;
      session.auth = false;
      return 'ok';
    }
    if (e.status === 401) return 'login';
    throw e;
  }
}

export const canChange = () => session.role === 'admin';

/** Builds an element: h('a', {href: '#/'}, 'text', child...). Attributes
 * starting with "on" are listeners; children are nodes or text. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A figure as shown: integers plainly, others to one decimal, unknown as a dash. */
export function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (typeof v !== 'number') return String(v);
  return Number.isInteger(v) ? v.toLocaleString('en') : v.toFixed(1);
}

/** A moment as shown, always with its zone: in `zone` (an IANA name,
 * e.g. a schedule's own) with its offset and name, else in the browser's
 * zone with the zone's abbreviation or offset. */
const CLOCK = { year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' };

export function time(ms, zone) {
  if (ms === null || ms === undefined) return '–';
  const at = new Date(ms);
  if (zone) {
    try {
      return at.toLocaleString('en-GB', { ...CLOCK, timeZone: zone, timeZoneName: 'shortOffset' }) + ' ' + zone;
    } catch {
      // A zone this browser does not know: the browser's own, named.
    }
  }
  return at.toLocaleString('en-GB', { ...CLOCK, timeZoneName: 'short' });
}

export function duration(ms) {
  if (ms === null || ms === undefined) return '–';
  const s = Math.round(ms / 1000);
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return Math.round(s / 3600) + ' h';
}

/** Encodes one path segment. */
export const seg = (s) => encodeURIComponent(s);

/** Announces the outcome of an action in the page's one polite status
 * region (figures that tick are never announced). */
export function announce(message, isError) {
  const box = document.getElementById('status');
  box.className = isError ? 'status error' : 'status';
  box.textContent = message;
}

/** The note explaining why actions are disabled, for aria-describedby. */
export const READ_NOTE = 'read-only-note';

/** An action button: disabled with an explanation for the read role;
 * otherwise runs `run` and announces its outcome or the API's error. */
export function action(text, run, opts = {}) {
  if (!canChange()) {
    const b = h('button', { type: 'button', class: opts.confirm ? 'danger' : null, disabled: true }, text);
    b.setAttribute('aria-describedby', READ_NOTE);
    return b;
  }
  if (opts.confirm) return confirmed(text, run, opts);
  const b = h('button', { type: 'button' }, text);
  b.addEventListener('click', () => perform(b, run, opts));
  return b;
}

async function perform(button, run, opts) {
  button.disabled = true;
  try {
    const said = await run();
    announce(typeof said === 'string' ? said : (opts.done || label(button) + ': done'));
  } catch (e) {
    announce((opts.failed || label(button) + ' failed') + ': ' + e.message + (e.code ? ' (' + e.code + ')' : ''), true);
  } finally {
    if (button.isConnected) button.disabled = false;
  }
}

const label = (b) => b.textContent;

/** A destructive action: the first press asks, in place, and only the
 * "Yes" button acts; focus moves to it and back. */
function confirmed(text, run, opts) {
  const wrap = h('span', { class: 'confirm' });
  const start = h('button', { type: 'button', class: 'danger' }, text);
  const ask = () => {
    const yes = h('button', { type: 'button', class: 'danger' }, 'Yes, ' + text.toLowerCase());
    const no = h('button', { type: 'button' }, 'Cancel');
    const back = () => {
      fill(wrap, start);
      start.focus();
    };
    yes.addEventListener('click', async () => {
      await perform(yes, run, { ...opts, done: opts.done || text + ': done', failed: opts.failed || text + ' failed' });
      if (wrap.isConnected) back();
    });
    no.addEventListener('click', back);
    fill(wrap, h('span', { class: 'question' }, opts.confirm + ' '), yes, ' ', no);
    yes.focus();
  };
  start.addEventListener('click', ask);
  wrap.append(start);
  return wrap;
}

/** A small form: labelled inputs and a submit button (disabled for the
 * read role); `submit` gets the values by name. */
export function form(fields, submitLabel, submit, opts = {}) {
  const f = h('form', { class: 'inline-form' });
  for (const fd of fields) {
    const id = 'f-' + Math.random().toString(36).slice(2, 9);
    append(f, [
      h('label', { for: id }, fd.label),
      h('input', {
        id,
        name: fd.name,
        type: fd.type || 'text',
        value: fd.value ?? '',
        inputmode: fd.inputmode,
        min: fd.min,
        placeholder: fd.placeholder,
        autocomplete: 'off',
        'aria-describedby': fd.hint ? id + '-hint' : null,
      }),
      fd.hint ? h('span', { id: id + '-hint', class: 'hint' }, fd.hint) : null,
    ]);
  }
  const b = h('button', { type: 'submit' }, submitLabel);
  if (opts.changes !== false && !canChange()) {
    b.disabled = true;
    b.setAttribute('aria-describedby', READ_NOTE);
  }
  f.append(b);
  f.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const values = Object.fromEntries(new FormData(f).entries());
    if (opts.changes === false) {
      submit(values);
      return;
    }
    perform(b, () => submit(values), opts);
  });
  return f;
}

/** A definition list of [term, value] pairs; values may be nodes. */
export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v))));
}

/** A table with a caption, column headers and rows of cells. */
export function table(caption, heads, rows, empty) {
  if (!rows.length) return h('p', { class: 'empty' }, empty || 'Nothing to show.');
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      {},
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, heads.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))),
    ),
  );
}

// ---- live series ----------------------------------------------------------

/** A series of /v1/console: its window, then every new sample pushed by
 * /v1/console/live. `onChange(series)` runs on each. A stream that ends
 * (dropped for being slow, or a restart) is reopened after a pause, and
 * the window reloaded. */
export class Live {
  constructor(kind, name, onChange) {
    this.kind = kind;
    this.name = name || '';
    this.onChange = onChange;
    this.fields = [];
    this.samples = [];
    this.closed = false;
    this.open();
  }

  query() {
    const q = new URLSearchParams({ kind: this.kind });
    if (this.name) q.set('name', this.name);
    return q.toString();
  }

  async open() {
    if (this.closed) return;
    try {
      const s = await api('GET', '/v1/console/series?' + this.query());
      this.fields = s.fields;
      this.window = s.window_s;
      this.samples = s.samples;
      this.onChange(this);
    } catch (e) {
      announce('Could not load the figures: ' + e.message, true);
      return;
    }
    if (this.closed) return;
    this.source = new EventSource('/v1/console/live?' + this.query(), { withCredentials: true });
    this.source.addEventListener('sample', (ev) => {
      this.samples.push(JSON.parse(ev.data));
      if (this.samples.length > 900) this.samples.shift();
      this.onChange(this);
    });
    this.source.onerror = () => {
      this.source.close();
      this.source = null;
      if (!this.closed) this.retry = setTimeout(() => this.open(), 3000);
    };
  }

  /** Adds a figure computed from the samples: `fn(live)` answers one
   * value per sample. */
  derive(field, fn) {
    this.derived = { ...this.derived, [field]: fn };
  }

  /** The last known value of `field` in the window, or null (a figure
   * measured only when something happens keeps its last measure). */
  last(field) {
    if (this.derived?.[field]) return this.derived[field](this).findLast((v) => v !== null) ?? null;
    const i = this.fields.indexOf(field);
    if (i < 0) return null;
    for (let n = this.samples.length - 1; n >= 0; n--) {
      const v = this.samples[n][i + 1];
      if (v !== null && v !== undefined) return v;
    }
    return null;
  }

  /** [t, value] pairs of `field`. */
  points(field) {
    if (this.derived?.[field]) {
      const vs = this.derived[field](this);
      return this.samples.map((s, n) => [s[0], vs[n]]);
    }
    const i = this.fields.indexOf(field);
    return this.samples.map((s) => [s[0], s[i + 1]]);
  }

  close() {
    this.closed = true;
    clearTimeout(this.retry);
    if (this.source) this.source.close();
  }
}

/** For `live.derive`: how many happened in the minute up to each sample,
 * from `field`, a per-minute rate measured over each sample's interval
 * (the rate times the interval, added up over the last 60 s, rounded:
 * one admission is 1 for a minute, not 60 for one second). */
export function lastMinute(field) {
  return (live) => {
    const i = live.fields.indexOf(field);
    const counts = live.samples.map((s, n) => {
      const v = s[i + 1];
      const since = n > 0 ? s[0] - live.samples[n - 1][0] : 1000;
      return v === null || v === undefined ? 0 : (v * since) / 60000;
    });
    let from = 0;
    let sum = 0;
    return live.samples.map((s, n) => {
      sum += counts[n];
      while (live.samples[from][0] <= s[0] - 60000) sum -= counts[from++];
      return i < 0 ? null : Math.max(0, Math.round(sum));
    });
  };
}

// ---- charts ---------------------------------------------------------------

const SVG = 'http://www.w3.org/2000/svg';

/** A span as a chart's axis says it: seconds up to two minutes. */
const ago = (ms) => (ms < 120000 ? Math.round(ms / 1000) + ' s' : Math.round(ms / 60000) + ' min');

function svg(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** A line chart of some fields of a live series over its window, as SVG:
 * one line per field (dashed for the second), a legend, and a text
 * summary for screen readers. `sparkline` draws it small, without axes. */
export function chart(live, fields, title, opts = {}) {
  // Full charts are drawn near their shown size, so labels read at 12 px.
  const w = opts.sparkline ? 120 : 360;
  const ht = opts.sparkline ? 32 : 130;
  const pad = opts.sparkline ? 2 : 20;
  // The window is 15 minutes; a series sampled for less is drawn over
  // what it has (at least 10 s), so a fresh one is not a dot at the edge.
  const now = Date.now();
  const full = (live.window || 900) * 1000;
  const oldest = live.samples.length ? live.samples[0][0] : now;
  const span = Math.min(full, Math.max(10000, now - oldest));
  const from = now - span;
  let max = 0;
  for (const f of fields) for (const [, v] of live.points(f)) if (v !== null && v > max) max = v;
  max = max > 0 ? max : 1;
  const x = (t) => pad + ((t - from) / span) * (w - 2 * pad);
  const y = (v) => ht - pad - (v / max) * (ht - 2 * pad);
  const summary = fields
    .map((f) => {
      const vals = live.points(f).map((p) => p[1]).filter((v) => v !== null);
      if (!vals.length) return f.replace(/_/g, ' ') + ': no samples yet';
      return `${f.replace(/_/g, ' ')} now ${fmt(vals[vals.length - 1])}, highest ${fmt(Math.max(...vals))}`;
    })
    .join('; ');
  const root = svg('svg', {
    viewBox: `0 0 ${w} ${ht}`,
    class: opts.sparkline ? 'chart spark' : 'chart',
    role: 'img',
    'aria-label': `${title}, last ${ago(span)}: ${summary}`,
  });
  // Stretching would squash the labels; a sparkline has none.
  if (opts.sparkline) root.setAttribute('preserveAspectRatio', 'none');
  if (!opts.sparkline) {
    root.append(svg('line', { x1: pad, y1: ht - pad, x2: w - pad, y2: ht - pad, class: 'axis' }));
    const label = (x, y, text, anchor) => {
      const t = svg('text', { x, y, class: 'tick', 'text-anchor': anchor });
      t.textContent = text;
      root.append(t);
    };
    label(pad, pad - 8, fmt(max), 'start');
    label(pad, ht - 6, '−' + ago(span), 'start');
    label(w - pad, ht - 6, 'now', 'end');
  }
  fields.forEach((f, n) => {
    let d = '';
    let pen = false;
    for (const [t, v] of live.points(f)) {
      if (v === null) {
        pen = false;
        continue;
      }
      d += `${pen ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    }
    // A lone sample still shows, as a short dash.
    if (d && !d.includes('L')) d += 'h-4';
    root.append(svg('path', { d: d || 'M0,0', class: `line c${n}` }));
  });
  const fig = h('figure', { class: opts.sparkline ? 'spark-fig' : 'chart-fig' }, root);
  if (!opts.sparkline) {
    fig.append(
      h(
        'figcaption',
        {},
        title + ' ',
        fields.map((f, n) => h('span', { class: `key c${n}` }, f.replace(/_/g, ' '))),
      ),
    );
  }
  return fig;
}
