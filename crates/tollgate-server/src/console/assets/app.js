// The console's pages, one per hash route: #/ (overview), #/gates,
// #/gates/NAME, and the same for elections, queues, schedules, rooms and
// limits.
// Each page draws once from the API, then keeps its figures and charts
// current from its live series (lib.js).

import {
  Live, READ_NOTE, action, announce, api, canChange, chart, duration, facts, fill, fmt, form, h, loadSession,
  lastMinute, seg, session, table, time,
} from './lib.js';

const main = document.getElementById('main');
/** What the current page keeps open: its live series. */
let open = [];

const KINDS = [
  { kind: 'gates', one: 'gate', title: 'Gates', field: 'gates' },
  { kind: 'queues', one: 'queue', title: 'Queues', field: 'queues' },
  { kind: 'schedules', one: 'schedule', title: 'Schedules', field: 'schedules' },
  { kind: 'rooms', one: 'room', title: 'Rooms', field: 'rooms' },
  { kind: 'limits', one: 'limit', title: 'Limits', field: 'limits' },
];

function live(kind, name, onChange) {
  const l = new Live(kind, name, onChange);
  open.push(l);
  return l;
}

/** A figure that follows a live series: updated in place, never announced. */
function figures(l, fields, labels) {
  return h(
    'dl',
    { class: 'figures' },
    fields.map((f, i) =>
      h('div', {}, h('dt', {}, labels ? labels[i] : f.replace(/_/g, ' ')), h('dd', { 'data-field': f }, fmt(l.last(f)))),
    ),
  );
}

function refreshFigures(root, l) {
  for (const dd of root.querySelectorAll('dd[data-field]')) {
    const v = l.last(dd.dataset.field);
    const text = dd.dataset.field === 'paused' ? (v === null ? '–' : v ? 'yes' : 'no') : fmt(v);
    if (dd.textContent !== text) dd.textContent = text;
  }
}

/** A section whose charts redraw on each sample. */
function charts(l, specs) {
  const box = h('div', { class: 'charts' });
  const draw = () => fill(box, specs.map(([fields, title]) => chart(l, fields, title)));
  draw();
  return { box, draw };
}

function heading(text, sub) {
  return h('header', { class: 'page-head' }, h('h1', { tabindex: '-1', id: 'page-title' }, text), sub ? h('p', {}, sub) : null);
}

const WINDOW_NOTE = 'Figures are sampled every second by this server; charts show the last 15 minutes.';

// ---- overview -------------------------------------------------------------

async function overview() {
  const cards = h('ul', { class: 'cards' });
  const rooms = h('div');
  const store = h('div');
  fill(
    main,
    heading('Overview', WINDOW_NOTE),
    h('section', { 'aria-labelledby': 'kinds' }, h('h2', { id: 'kinds' }, 'Everything'), cards),
    h('section', { 'aria-labelledby': 'rooms-h' }, h('h2', { id: 'rooms-h' }, 'Waiting rooms'), rooms),
    h('section', { 'aria-labelledby': 'store-h' }, h('h2', { id: 'store-h' }, 'Store'), store),
  );
  api('GET', '/v1/store')
    .then((s) => fill(store, storeFacts(s)))
    .catch((e) => fill(store, h('p', { class: 'error' }, e.message)));
  const draw = (l) => {
    fill(
      cards,
      KINDS.map((k) =>
        h(
          'li',
          { class: 'card' },
          h('h3', {}, h('a', { href: '#/' + k.kind }, k.title)),
          h('p', { class: 'count' }, h('span', { 'data-field': k.field }, fmt(l.last(k.field))), ' ', h('span', { class: 'unit' }, k.kind)),
          chart(l, [k.field], k.title + ' count', { sparkline: true }),
        ),
      ),
    );
  };
  live('overview', '', draw);
  try {
    const r = await api('GET', '/v1/rooms?limit=100');
    fill(
      rooms,
      table(
        'Configured waiting rooms',
        ['Room', 'Active', 'Waiting', 'Capacity', 'Paused'],
        r.rooms.map((x) => [h('a', { href: '#/rooms/' + seg(x.room) }, x.room), fmt(x.active), fmt(x.waiting), fmt(x.capacity), fmt(x.paused)]),
        'No waiting room is configured on this server.',
      ),
    );
  } catch (e) {
    fill(rooms, h('p', { class: 'error' }, e.message));
  }
  return 'Overview';
}

/** The store this server runs on; for the embedded store on disk, where
 * its data lives and how its log and snapshots stand (docs/DURABILITY.md). */
function storeFacts(s) {
  if (s.kind === 'redis') return facts([['Kind', 'Redis']]);
  const d = s.durable;
  if (!d) return facts([['Kind', 'embedded, memory only: everything is lost when the server stops']]);
  const mib = (b) => fmt(Math.round((b / 1048576) * 10) / 10) + ' MiB';
  return facts([
    ['Kind', 'embedded, on disk'],
    ['Data directory', d.data_dir],
    ['fsync', d.fsync],
    ['Disk', d.disk_failing ? 'refusing writes: changes are refused' : 'taking writes'],
    ['Log on disk', mib(d.log_bytes)],
    ['Last snapshot', d.last_snapshot_ms ? time(d.last_snapshot_ms) + ' (' + mib(d.snapshot_bytes) + ')' : 'none since start'],
    ['Syncs', fmt(d.fsyncs) + ' (average ' + fmt(d.fsync_avg_ms) + ' ms, longest ' + fmt(d.fsync_max_ms) + ' ms)'],
    ['Recovered at start', fmt(d.recovered.snapshot_names) + ' names from the snapshot, ' + fmt(d.recovered.replayed) + ' log records replayed in ' + fmt(d.recovered.took_ms) + ' ms' + (d.recovered.torn_bytes ? '; a torn last write of ' + fmt(d.recovered.torn_bytes) + ' bytes cut off' : '')],
  ]);
}

// ---- lists ----------------------------------------------------------------

const COLUMNS = {
  gates: [['Gate', 'gate'], ['Holders', 'holders'], ['Used', 'used'], ['Capacity', 'capacity'], ['Waiting', 'waiting']],
  queues: [['Queue', 'queue'], ['Ready', 'ready'], ['Delayed', 'delayed'], ['In flight', 'in_flight'], ['Dead', 'dead'], ['Paused', 'paused']],
  schedules: [['Schedule', 'name'], ['When', 'when'], ['Queue', 'queue'], ['Next', 'next_ms'], ['Paused', 'paused']],
  rooms: [['Room', 'room'], ['Active', 'active'], ['Waiting', 'waiting'], ['Capacity', 'capacity'], ['Paused', 'paused']],
  limits: [['Limit', 'name'], ['Rate', 'rate'], ['Burst', 'burst'], ['Algorithm', 'algorithm']],
};

async function list(kind, params) {
  const k = KINDS.find((x) => x.kind === kind);
  const prefix = params.get('prefix') || '';
  const cursor = params.get('cursor') || '';
  const search = form([{ name: 'prefix', label: 'Names starting with', value: prefix }], 'Search', (v) => {
    location.hash = '#/' + kind + (v.prefix ? '?prefix=' + encodeURIComponent(v.prefix) : '');
  }, { changes: false });
  const body = h('div');
  fill(main, heading(k.title), h('search', {}, search), body);
  const q = new URLSearchParams({ limit: '50' });
  if (prefix) q.set('prefix', prefix);
  if (cursor) q.set('cursor', cursor);
  try {
    const page = await api('GET', `/v1/${kind}?${q}`);
    const cols = COLUMNS[kind];
    const rows = page[kind].map((item) =>
      cols.map(([, f], i) => {
        if (i === 0) return h('a', { href: `#/${kind}/${seg(item[f])}` }, item[f]);
        return f.endsWith('_ms') ? time(item[f], item.zone) : fmt(item[f]);
      }),
    );
    const next = page.next
      ? h('p', {}, h('a', { href: `#/${kind}?` + new URLSearchParams({ prefix, cursor: page.next }), class: 'button-link' }, 'Next page'))
      : null;
    fill(body, table(k.title + (prefix ? ` starting with “${prefix}”` : ''), cols.map((c) => c[0]), rows, `No ${kind} to show.`), next);
  } catch (e) {
    fill(body, h('p', { class: 'error' }, e.message));
  }
  return k.title;
}

// ---- gate -----------------------------------------------------------------

async function gate(name) {
  const base = '/v1/gates/' + seg(name);
  const l = live('gate', name, () => {
    refreshFigures(main, l);
    c.draw();
  });
  const c = charts(l, [[['holders', 'waiting'], 'Holders and waiting']]);
  const holders = h('div');
  const line = h('div');
  const capacity = form([{ name: 'capacity', label: 'Capacity', type: 'number', min: 1, inputmode: 'numeric' }], 'Set capacity', async (v) => {
    await api('PUT', base + '/capacity', { capacity: Number(v.capacity) });
    return `Capacity of ${name} set to ${v.capacity}.`;
  });
  const reload = async () => {
    try {
      const hs = await api('GET', base + '/holders?limit=100');
      fill(
        holders,
        table('Holders, soonest to end first', ['Label', 'Fence', 'Time left', 'Action'], hs.holders.map((x) => [
          x.label ?? '–', fmt(x.fence), duration(x.ttl_ms),
          action('Revoke', async () => {
            await api('DELETE', `${base}/holders/${seg(x.handle)}`);
            reload();
            return `Revoked the holder ${x.label ?? x.handle}.`;
          }, { confirm: `Revoke ${x.label ?? x.handle}?` }),
        ]), 'Nobody holds this gate.'),
      );
      const ln = await api('GET', base + '/line?limit=20');
      fill(
        line,
        table('Head of the line', ['Position', 'Number', 'Permits', 'Label', 'Action'], ln.line.map((x) => [
          fmt(x.position), fmt(x.number), fmt(x.permits), x.label ?? '–',
          action('Remove', async () => {
            await api('DELETE', `${base}/line/${x.number}`);
            reload();
            return `Removed ticket ${x.number} from the line.`;
          }, { confirm: `Remove ticket ${x.number}?` }),
        ]), 'Nobody waits.'),
      );
    } catch (e) {
      fill(holders, h('p', { class: 'error' }, e.message));
    }
  };
  fill(
    main,
    heading('Gate ' + name, WINDOW_NOTE),
    figures(l, ['capacity', 'used', 'holders', 'waiting'], ['Capacity', 'Used', 'Holders', 'Waiting']),
    c.box,
    h('section', { 'aria-labelledby': 'cap-h' }, h('h2', { id: 'cap-h' }, 'Capacity'), capacity),
    h('section', { 'aria-labelledby': 'hold-h' }, h('h2', { id: 'hold-h' }, 'Holders'), h('p', {}, h('button', { type: 'button', onclick: reload }, 'Refresh holders and line')), holders),
    h('section', { 'aria-labelledby': 'line-h' }, h('h2', { id: 'line-h' }, 'Line'), line),
  );
  await reload();
  return 'Gate ' + name;
}

// ---- elections ------------------------------------------------------------

/** Who leads, as a row of facts. */
function leaderFacts(l) {
  if (!l) return h('p', { 'data-leader': 'none' }, 'Nobody leads.');
  return facts([
    ['Leader', l.label ?? '–'],
    ['Fence', fmt(l.fence)],
    ['Leading since', time(l.since_ms)],
    ['Lease left when read', duration(l.ttl_ms)],
  ]);
}

/** Elections are gates of capacity 1 whose holder leads: the list shows
 * each with its leader now. */
async function elections(params) {
  const prefix = params.get('prefix') || '';
  const search = form([{ name: 'prefix', label: 'Names starting with', value: prefix }], 'Search', (v) => {
    location.hash = '#/elections' + (v.prefix ? '?prefix=' + encodeURIComponent(v.prefix) : '');
  }, { changes: false });
  const body = h('div');
  fill(
    main,
    heading('Elections', 'Every gate of capacity 1 is an election: its holder leads (tollgate elect, or a lock held with a label).'),
    h('search', {}, search),
    body,
  );
  try {
    const q = new URLSearchParams({ limit: '100' });
    if (prefix) q.set('prefix', prefix);
    const page = await api('GET', '/v1/gates?' + q);
    const ones = page.gates.filter((g) => g.capacity === 1);
    const rows = await Promise.all(ones.map(async (g) => {
      const e = await api('GET', '/v1/elections/' + seg(g.gate)).catch(() => ({ leader: null }));
      const l = e.leader;
      return [h('a', { href: '#/elections/' + seg(g.gate) }, g.gate), l ? (l.label ?? '–') : 'nobody', l ? fmt(l.fence) : '–', l ? time(l.since_ms) : '–', fmt(g.waiting)];
    }));
    fill(body, table('Elections' + (prefix ? ` starting with “${prefix}”` : ''), ['Election', 'Leader', 'Fence', 'Since', 'Candidates waiting'], rows, 'No elections to show.'));
  } catch (e) {
    fill(body, h('p', { class: 'error' }, e.message));
  }
  return 'Elections';
}

/** One election: its leader, kept current from the election's event
 * stream, and the changes seen while the page is open. */
async function election(name) {
  const now = h('div');
  const log = [];
  const changes = h('div');
  const drawLog = () => fill(changes, table('Changes seen on this page, newest first', ['At', 'Leader', 'Fence'], log.map((c) => [time(c.at_ms), c.leader ? (c.leader.label ?? '–') : 'nobody', c.leader ? fmt(c.leader.fence) : '–']), 'No change yet.'));
  const first = await api('GET', '/v1/elections/' + seg(name));
  fill(now, leaderFacts(first.leader));
  drawLog();
  fill(
    main,
    heading('Election ' + name, 'Follows the leader as the server sees it (read every 50 ms). A leadership shorter than that may go unseen.'),
    h('section', { 'aria-labelledby': 'lead-h' }, h('h2', { id: 'lead-h' }, 'Leader'), now),
    h('section', { 'aria-labelledby': 'changes-h' }, h('h2', { id: 'changes-h' }, 'Changes'), changes),
    h('p', {}, h('a', { href: '#/gates/' + seg(name) }, 'Its gate: holders, candidates in line, revoke')),
  );
  const stream = {
    source: null,
    closed: false,
    retry: null,
    open() {
      if (this.closed) return;
      this.source = new EventSource('/v1/elections/' + seg(name) + '/events', { withCredentials: true });
      // A (re)connected stream's first word is the leader now: a change
      // made while it was away shows then.
      this.source.addEventListener('hello', (ev) => {
        fill(now, leaderFacts(JSON.parse(ev.data).leader));
      });
      this.source.addEventListener('leader', (ev) => {
        const d = JSON.parse(ev.data);
        fill(now, leaderFacts(d.leader));
        log.unshift(d);
        if (log.length > 50) log.pop();
        drawLog();
      });
      this.source.onerror = () => {
        this.source.close();
        if (!this.closed) this.retry = setTimeout(() => this.open(), 3000);
      };
    },
    close() {
      this.closed = true;
      clearTimeout(this.retry);
      this.source?.close();
    },
  };
  stream.open();
  open.push(stream);
  return 'Election ' + name;
}

// ---- queue ----------------------------------------------------------------

const STATES = ['ready', 'delayed', 'running', 'dead', 'completed'];

async function queue(name, params) {
  const base = '/v1/queues/' + seg(name);
  const state = STATES.includes(params.get('state')) ? params.get('state') : 'ready';
  const cursor = params.get('cursor') || '';
  const l = live('queue', name, () => {
    refreshFigures(main, l);
    c.draw();
  });
  const c = charts(l, [
    [['ready', 'delayed'], 'Ready and delayed'],
    [['in_flight', 'dead'], 'In flight and dead'],
    [['pushed_per_s', 'acked_per_s'], 'Pushed and acked per second'],
    [['lateness_p99_ms'], 'Lateness of promoted jobs, 99th percentile (ms)'],
  ]);
  const control = h('p', { class: 'actions' });
  const jobs = h('div');
  const detail = h('div', { id: 'job-detail' });
  const drawControl = async () => {
    try {
      const s = await api('GET', base);
      fill(
        control,
        'Paused: ', h('strong', {}, s.paused ? 'yes' : 'no'), ' ',
        s.paused
          ? action('Resume', async () => { await api('POST', base + '/resume'); drawControl(); return `Queue ${name} resumed.`; })
          : action('Pause', async () => { await api('POST', base + '/pause'); drawControl(); return `Queue ${name} paused: claims get nothing.`; }),
        ' ',
        action('Replay all dead', async () => {
          const r = await api('POST', base + '/dead/replay', {});
          showJobs();
          return `Replayed ${r.replayed} dead jobs.`;
        }, { confirm: 'Replay every dead job?' }),
        ' ',
        action('Purge all dead', async () => {
          const r = await api('POST', base + '/dead/purge', {});
          showJobs();
          return `Purged ${r.purged} dead jobs.`;
        }, { confirm: 'Delete every dead job for good?' }),
      );
    } catch (e) {
      fill(control, h('span', { class: 'error' }, e.message));
    }
  };
  const showJob = async (id) => {
    try {
      const j = await api('GET', `${base}/jobs/${seg(id)}`);
      const acts = [];
      if (j.state === 'dead') {
        acts.push(action('Replay', async () => {
          const r = await api('POST', base + '/dead/replay', { id: j.id });
          showJobs();
          showJob(j.id);
          return r.replayed ? `Job ${j.id} replayed.` : `Job ${j.id} was not dead any more.`;
        }, { confirm: `Replay job ${j.id}?` }));
        acts.push(' ');
        acts.push(action('Purge', async () => {
          await api('POST', base + '/dead/purge', { id: j.id });
          showJobs();
          fill(detail);
          return `Job ${j.id} purged.`;
        }, { confirm: `Delete job ${j.id} for good?` }));
      } else if (j.state === 'ready' || j.state === 'delayed') {
        acts.push(action('Cancel', async () => {
          await api('DELETE', `${base}/jobs/${seg(j.id)}`);
          showJobs();
          fill(detail);
          return `Job ${j.id} cancelled.`;
        }, { confirm: `Cancel job ${j.id}?` }));
      }
      const when = j.due_ms ?? j.lease_until_ms ?? j.died_ms ?? j.acked_ms;
      fill(
        detail,
        h('h3', {}, 'Job ' + j.id),
        facts([
          ['State', j.state], ['Attempts', `${j.attempts} of ${j.max_attempts}`], ['Priority', fmt(j.priority)],
          ['Group', j.group ?? 'default'], ['Fence', fmt(j.fence)], ['Time', time(when)], ['Last error', j.last_error ?? '–'],
          ['Payload', `${fmt(j.payload_size)} bytes${j.payload_truncated ? ' (preview truncated)' : ''}`],
        ]),
        h('pre', { class: 'payload', tabindex: '0', 'aria-label': 'Payload preview' }, j.payload_preview ?? ''),
        h('p', { class: 'actions' }, acts),
      );
    } catch (e) {
      fill(detail, h('p', { class: 'error' }, e.message));
    }
  };
  const showJobs = async () => {
    const q = new URLSearchParams({ state, limit: '25' });
    if (cursor) q.set('cursor', cursor);
    try {
      const page = await api('GET', `${base}/jobs?${q}`);
      const rows = page.jobs.map((j) => [
        h('button', { type: 'button', class: 'linkish', onclick: () => showJob(j.id) }, j.id),
        `${j.attempts}/${j.max_attempts}`,
        time(j.due_ms ?? j.lease_until_ms ?? j.died_ms ?? j.acked_ms),
        j.last_error ?? '–',
      ]);
      const next = page.next
        ? h('p', {}, h('a', { class: 'button-link', href: `#/queues/${seg(name)}?` + new URLSearchParams({ state, cursor: page.next }) }, 'Next page'))
        : null;
      fill(jobs, table(`Jobs ${state}`, ['Id', 'Attempts', 'Time', 'Last error'], rows, `No ${state} jobs.`), next);
    } catch (e) {
      fill(jobs, h('p', { class: 'error' }, e.message));
    }
  };
  const tabs = h(
    'nav',
    { 'aria-label': 'Job states', class: 'tabs' },
    h('ul', {}, STATES.map((s) => h('li', {}, h('a', { href: `#/queues/${seg(name)}?state=${s}`, 'aria-current': s === state ? 'page' : null }, s)))),
  );
  const find = form([{ name: 'id', label: 'Job id' }], 'Show job', (v) => v.id && showJob(v.id.trim()), { changes: false });
  // Fair queues: the limits (set here at runtime) and the groups with
  // the most ready jobs (docs/JOBS.md, "Fair queues").
  const limits = h('div');
  const groups = h('div');
  const showGroups = async () => {
    try {
      const page = await api('GET', `${base}/groups?limit=20`);
      const rows = page.groups.map((g) => [
        g.group ?? '(default)',
        fmt(g.ready),
        fmt(g.running),
        g.held === 'rate' ? `rate, until ${time(g.held_until_ms)}` : (g.held ?? '–'),
        [g.concurrency == null ? '–' : `${g.concurrency} at once`, g.rate ?? ''].filter(Boolean).join(', '),
      ]);
      const more = page.next ? h('p', { class: 'hint' }, 'The 20 with the most ready jobs; GET …/groups pages through all.') : null;
      fill(groups, table('Groups, most ready first', ['Group', 'Ready', 'Running', 'Held by', 'Limits'], rows, 'No group has ready or running jobs.'), more);
    } catch (e) {
      fill(groups, h('p', { class: 'error' }, e.message));
    }
  };
  const drawLimits = async () => {
    try {
      const s = await api('GET', `${base}/settings`);
      const num = (v) => (v === '' || v == null ? null : Number(v));
      const text = (v) => (v === '' || v == null ? null : String(v).trim());
      fill(
        limits,
        form([
          { name: 'concurrency', label: 'Running at once', type: 'number', min: 1, inputmode: 'numeric', value: s.concurrency ?? '', hint: 'empty: no limit' },
          { name: 'rate', label: 'Rate', value: s.rate ?? '', placeholder: '50/s' },
          { name: 'group_concurrency', label: 'Per group at once', type: 'number', min: 1, inputmode: 'numeric', value: s.group_concurrency ?? '' },
          { name: 'group_rate', label: 'Per group rate', value: s.group_rate ?? '', placeholder: '10/s' },
        ], 'Set limits', async (v) => {
          await api('PUT', `${base}/settings`, {
            concurrency: num(v.concurrency), rate: text(v.rate),
            group_concurrency: num(v.group_concurrency), group_rate: text(v.group_rate),
          });
          drawLimits();
          showGroups();
          return `Queue ${name}'s limits set: they apply from the next claim.`;
        }),
      );
    } catch (e) {
      fill(limits, h('p', { class: 'error' }, e.message));
    }
  };
  fill(
    main,
    heading('Queue ' + name, WINDOW_NOTE),
    figures(l, ['ready', 'delayed', 'in_flight', 'dead', 'pushed_per_s', 'acked_per_s'], ['Ready', 'Delayed', 'In flight', 'Dead', 'Pushed / s', 'Acked / s']),
    control,
    c.box,
    h('section', { 'aria-labelledby': 'groups-h' }, h('h2', { id: 'groups-h' }, 'Limits and groups'), limits, groups),
    h('section', { 'aria-labelledby': 'jobs-h' }, h('h2', { id: 'jobs-h' }, 'Jobs'), h('search', {}, find), tabs, jobs, detail),
  );
  await Promise.all([drawControl(), showJobs(), drawLimits(), showGroups()]);
  if (params.get('job')) await showJob(params.get('job'));
  return 'Queue ' + name;
}

// ---- schedule -------------------------------------------------------------

async function schedule(name) {
  const base = '/v1/schedules/' + seg(name);
  const body = h('div');
  const draw = async () => {
    try {
      const s = await api('GET', base);
      const next = await api('GET', base + '/next?count=5');
      fill(
        body,
        facts([
          ['When', s.when], ['Zone', s.zone], ['Queue', h('a', { href: '#/queues/' + seg(s.queue) }, s.queue)],
          ['Misfire', s.misfire], ['Max attempts', fmt(s.max_attempts)], ['Priority', fmt(s.priority)],
          ['Group', s.group ?? 'default'], ['Jitter', duration(s.jitter_ms)], ['Paused', s.paused ? 'yes' : 'no'],
        ]),
        h('p', { class: 'actions' },
          s.paused
            ? action('Resume', async () => { await api('POST', base + '/resume'); draw(); return `Schedule ${name} resumed.`; })
            : action('Pause', async () => { await api('POST', base + '/pause'); draw(); return `Schedule ${name} paused.`; }),
          ' ',
          action('Trigger now', async () => {
            const r = await api('POST', base + '/trigger');
            draw();
            return `Pushed job ${r.job_id}.`;
          }),
        ),
        h('h2', {}, 'Next runs'),
        next.next_ms.length ? h('ol', {}, next.next_ms.map((t) => h('li', {}, time(t, s.zone)))) : h('p', { class: 'empty' }, 'None (paused, or past its end).'),
        h('h2', {}, 'Last runs'),
        table('The last ticks fired, newest first', ['Time', 'Job', 'How'], [...s.recent].reverse().map((r) => [
          time(r.at_ms, s.zone),
          h('a', { href: `#/queues/${seg(s.queue)}?job=${encodeURIComponent(r.job_id)}` }, r.job_id),
          r.manual ? 'triggered' : 'on time',
        ]), 'It has not fired yet.'),
      );
    } catch (e) {
      fill(body, h('p', { class: 'error' }, e.message));
    }
  };
  fill(main, heading('Schedule ' + name), body);
  await draw();
  return 'Schedule ' + name;
}

// ---- room -----------------------------------------------------------------

async function room(name) {
  const base = '/v1/rooms/' + seg(name);
  const l = live('room', name, () => {
    refreshFigures(main, l);
    c.draw();
  });
  // One definition for the figure and its chart: admissions counted over
  // the last 60 s (the series' per-minute rate of each 1 s sample, added
  // up), so one admission reads 1, never "60.0" in one place and 0 in another.
  l.derive('admitted_last_minute', lastMinute('admissions_per_minute'));
  const c = charts(l, [
    [['active', 'waiting'], 'Active and waiting visitors'],
    [['admitted_last_minute'], 'Admitted in the minute up to each moment'],
    [['eta_error_s'], 'Mean error of the estimates of admitted visitors (s)'],
  ]);
  const control = h('div');
  const head = h('div');
  const drawControl = async () => {
    try {
      const s = await api('GET', base);
      // The room's state (docs/ROOMS.md, Room states): a button for each
      // other one; sold out asks first, as it lets everyone waiting go.
      const toState = (state, done) => async () => {
        const r = await api('PUT', base + '/state', { state });
        drawControl();
        drawHead();
        return done(r);
      };
      const stateActions = [];
      if (s.state === 'paused') stateActions.push(action('Resume', toState('open', () => `Room ${name} resumed.`)));
      else if (s.state !== 'open') stateActions.push(action('Open', toState('open', () => `Room ${name} is open.`)));
      if (s.state === 'open') stateActions.push(action('Pause', toState('paused', () => `Room ${name} paused: new visitors wait.`)));
      if (s.state !== 'closed' && s.state !== 'sold_out') stateActions.push(action('Close', toState('closed', () => `Room ${name} closed: newcomers are turned away, the line goes on.`)));
      if (s.state !== 'sold_out') {
        stateActions.push(action('Sold out', toState('sold_out', (r) => `Room ${name} sold out: ${fmt(r.dropped)} waiting visitors let go.`), { confirm: 'Mark this room sold out and let everyone waiting go?' }));
      }
      if (s.state !== 'passthrough') stateActions.push(action('Passthrough', toState('passthrough', () => `Room ${name} steps aside: every request goes to the site.`)));
      fill(
        control,
        h('p', {}, 'State: ', h('strong', { id: 'room-state' }, s.state),
          s.queueing === 'random' ? '; places go at random (queueing = "random").' : ''),
        h('p', { id: 'room-schedule' },
          s.opens_at ? `Opens at ${s.opens_at} (pre-queue from ${fmt(s.prequeue_seconds)} s before)` : 'No opening scheduled',
          s.closes_at ? `; closes at ${s.closes_at}.` : '.'),
        s.draw ? h('p', { id: 'room-draw' },
          s.draw.status === 'drawn'
            ? `Drawn: ${fmt(s.draw.entrants)} in the pre-queue; seed ${s.draw.seed} (commitment ${s.draw.commitment}).`
            : `The pre-queue is drawn at the opening; commitment ${s.draw.commitment} (published at /.tollgate/${name}/draw).`) : null,
        h('p', { class: 'actions' },
          ...stateActions.flatMap((a) => [a, ' ']),
          action('Reset', async () => {
            const r = await api('POST', base + '/reset');
            drawHead();
            return `Room ${name} reset: ${fmt(r.dropped)} waiting visitors dropped.`;
          }, { confirm: 'Drop everyone waiting in this room?' }),
        ),
        form([{ name: 'capacity', label: 'Capacity', type: 'number', min: 1, inputmode: 'numeric', value: s.capacity ?? '' }], 'Set capacity', async (v) => {
          await api('PUT', base + '/capacity', { capacity: Number(v.capacity) });
          return `Capacity of ${name} set to ${v.capacity}.`;
        }),
        form([
          { name: 'opens_at', label: 'Opens at', value: s.opens_at ?? '', hint: 'RFC 3339, e.g. 2026-12-01T10:00:00Z; empty: no opening time' },
          { name: 'prequeue', label: 'Pre-queue', value: s.opens_at ? `${s.prequeue_seconds}s` : '', hint: 'how long before the opening visitors may join, e.g. 30m' },
          { name: 'closes_at', label: 'Closes at', value: s.closes_at ?? '', hint: 'RFC 3339; empty: never' },
        ], 'Set schedule', async (v) => {
          const body = { opens_at: v.opens_at === '' ? null : v.opens_at, closes_at: v.closes_at === '' ? null : v.closes_at };
          if (v.opens_at !== '' && v.prequeue !== '') body.prequeue = v.prequeue;
          await api('PUT', base + '/schedule', body);
          drawControl();
          return v.opens_at === '' ? `Room ${name} has no opening scheduled.` : `Room ${name} opens at ${v.opens_at}.`;
        }),
        form([{ name: 'per_minute', label: 'Admissions per minute', type: 'number', min: 1, inputmode: 'numeric', value: s.admissions_per_minute ?? '', hint: 'empty: no cap' }], 'Set rate', async (v) => {
          const per = v.per_minute === '' ? null : Number(v.per_minute);
          await api('PUT', base + '/admission_rate', { per_minute: per });
          return per === null ? `Room ${name} admits without a cap.` : `Room ${name} admits at most ${per} a minute.`;
        }),
      );
    } catch (e) {
      fill(control, h('p', { class: 'error' }, e.message));
    }
  };
  const drawHead = async () => {
    try {
      const ln = await api('GET', base + '/line?limit=10');
      fill(head, table('Head of the line', ['Position', 'Number', 'Waiting for', 'Action'], ln.line.map((x) => [
        fmt(x.position), fmt(x.number), duration(x.age_ms),
        action('Remove', async () => {
          await api('DELETE', `${base}/line/${x.number}`);
          drawHead();
          return `Removed ticket ${x.number} from the line.`;
        }, { confirm: `Remove ticket ${x.number}?` }),
      ]), 'Nobody waits.'));
    } catch (e) {
      fill(head, h('p', { class: e.status === 404 && e.code === 'not_found' ? 'empty' : 'error' }, e.status === 404 && e.code === 'not_found' ? 'This server cannot show the line yet.' : e.message));
    }
  };
  fill(
    main,
    heading('Room ' + name, WINDOW_NOTE),
    figures(l, ['active', 'waiting', 'capacity', 'paused', 'admitted_last_minute', 'eta_error_s'], ['Active', 'Waiting', 'Capacity', 'Paused', 'Admitted, last 60 s', 'Estimate error (s)']),
    c.box,
    h('section', { 'aria-labelledby': 'ctl-h' }, h('h2', { id: 'ctl-h' }, 'Control'), control),
    h('section', { 'aria-labelledby': 'head-h' }, h('h2', { id: 'head-h' }, 'Line'), h('p', {}, h('button', { type: 'button', onclick: drawHead }, 'Refresh the line')), head),
  );
  await Promise.all([drawControl(), drawHead()]);
  return 'Room ' + name;
}

// ---- limit ----------------------------------------------------------------

async function limit(name) {
  const l = live('limit', name, () => {
    refreshFigures(main, l);
    c.draw();
  });
  const c = charts(l, [[['allowed_per_s', 'refused_per_s'], 'Allowed and refused per second']]);
  const about = h('div');
  fill(
    main,
    heading('Limit ' + name, WINDOW_NOTE + ' Decisions counted are this server’s.'),
    about,
    figures(l, ['allowed_per_s', 'refused_per_s'], ['Allowed / s', 'Refused / s']),
    c.box,
  );
  try {
    const x = await api('GET', '/v1/limits/' + seg(name));
    fill(about, facts([['Rate', x.rate], ['Burst', fmt(x.burst)], ['Algorithm', x.algorithm]]));
  } catch (e) {
    fill(about, h('p', { class: 'error' }, e.message));
  }
  return 'Limit ' + name;
}

// ---- login, routing -------------------------------------------------------

function login(message) {
  const f = form([{ name: 'token', label: 'Token', type: 'password' }], 'Sign in', async (v) => {
    try {
      const s = await api('POST', '/v1/session', { token: v.token });
      session.role = s.role;
      session.csrf = s.csrf;
      session.auth = true;
      begin();
    } catch (e) {
      announce('Sign-in failed: ' + e.message, true);
    }
  }, { changes: false });
  for (const l of open) l.close();
  open = [];
  fill(main, heading('Sign in'), h('p', {}, message || 'This server wants a token. It is kept in a cookie for this site only.'), f);
  fill(document.getElementById('who'));
  document.getElementById(READ_NOTE).hidden = true;
  document.title = 'Sign in · tollgate console';
  main.dataset.ready = 'login';
  document.getElementById('page-title').focus();
}

function drawSession() {
  const box = document.getElementById('who');
  const out = session.auth
    ? h('button', { type: 'button', onclick: async () => {
        try { await api('DELETE', '/v1/session'); } catch (_) { /* signed out either way */ }
        session.auth = false;
        login('Signed out.');
      } }, 'Sign out')
    : null;
  fill(box, 'Role: ', h('strong', {}, session.role), ' ', out);
  const note = document.getElementById(READ_NOTE);
  note.hidden = canChange();
}

const PAGES = { gates: gate, elections: election, queues: queue, schedules: schedule, rooms: room, limits: limit };

let first = true;

async function route() {
  // In-page anchors (the skip link) are not pages.
  if (!first && location.hash && !location.hash.startsWith('#/')) return;
  for (const l of open) l.close();
  open = [];
  const hash = location.hash.startsWith('#/') ? location.hash.slice(1) : '/';
  const [path, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  for (const a of document.querySelectorAll('#nav a')) {
    const here = a.getAttribute('href') === '#/' + (parts[0] || '');
    if (here) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  let title;
  try {
    if (parts.length === 0) title = await overview();
    else if (parts.length === 1 && parts[0] === 'elections') title = await elections(params);
    else if (parts.length === 1 && COLUMNS[parts[0]]) title = await list(parts[0], params);
    else if (parts.length === 2 && PAGES[parts[0]]) title = await PAGES[parts[0]](parts[1], params);
    else {
      fill(main, heading('Not found'), h('p', {}, h('a', { href: '#/' }, 'Back to the overview')));
      title = 'Not found';
    }
  } catch (e) {
    if (e.status === 401) return login();
    fill(main, heading('Error'), h('p', { class: 'error' }, e.message));
    title = 'Error';
  }
  document.title = title + ' · tollgate console';
  main.dataset.ready = parts.join('/') || 'overview';
  // Moving focus to the new page's heading tells a screen reader where it
  // is; not on the first load (the skip link comes first then).
  if (!first) document.getElementById('page-title')?.focus();
  first = false;
}

async function start() {
  window.addEventListener('tollgate-signed-out', () => login('Sign in again: the server did not accept this session.'));
  document.querySelector('.skip').addEventListener('click', (ev) => {
    ev.preventDefault();
    main.focus();
  });
  try {
    const s = await loadSession();
    if (s === 'login') return login();
  } catch (e) {
    fill(main, heading('Error'), h('p', { class: 'error' }, e.message));
    return;
  }
  begin();
}

let listening = false;

function begin() {
  drawSession();
  if (!listening) window.addEventListener('hashchange', route);
  listening = true;
  route();
}

start();
