// incastlab dashboard: polls the controller's read-only JSON API (docs/DESIGN.md) about once a
// second and draws the fabric, per-port/queue tables and the PS port's last 60 s. Vanilla JS, no deps.
"use strict";

(() => {
  const POLL_MS = 1000; // one poll round a second
  const STALE_MS = 3000; // data whose t has not advanced for this long is stale
  const FETCH_TIMEOUT_MS = 2500; // a hung controller counts as not answering
  const TOPO_REFRESH_MS = 10000; // topology re-read (a restarted controller may serve another fabric)
  const WINDOW_S = 60; // chart window
  const LOCAL_PORT_MIN = 0xffffff00; // OpenFlow reserved ports (LOCAL etc.) are not fabric ports
  const SVGNS = "http://www.w3.org/2000/svg";

  const state = {
    topo: null,
    topoSig: "",
    topoFetchedAt: 0,
    psKey: null, // "lf1:3"
    ports: new Map(), // "sw:port" -> /api/ports entry
    queues: new Map(), // "sw:port:qid" -> /api/queues entry
    portDrops: new Map(), // "sw:port" -> {dps, total, txDropped, dropping}
    prevTotals: new Map(), // "sw:port" -> drops total of the previous fresh sample
    rateSeries: new Map(), // t -> {t, tx, rx} (bit/s)
    dropSeries: new Map(), // t -> {t, dps}
    lastT: null, // newest data timestamp (server clock)
    lastFreshWall: null, // Date.now() when lastT last advanced
    failures: 0, // consecutive failed /api/ports polls
    lastError: "",
    startedWall: Date.now(),
  };

  const $ = (id) => document.getElementById(id);
  const portKey = (sw, port) => `${sw}:${port}`;
  const natural = (a, b) => String(a).localeCompare(String(b), "en", { numeric: true });

  // ---------- helpers ----------
  async function fetchJSON(path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const resp = await fetch(path, { cache: "no-store", signal: ctl.signal });
      if (!resp.ok) throw new Error(`${path}: HTTP ${resp.status}`);
      return await resp.json();
    } catch (err) {
      if (err.name === "AbortError") throw new Error(`${path}: no answer in ${FETCH_TIMEOUT_MS} ms`);
      if (err instanceof TypeError) throw new Error(`${path}: ${err.message}`); // connection refused/reset
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  function svg(tag, attrs = {}, parent = null) {
    const el = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    if (parent) parent.appendChild(el);
    return el;
  }

  function hhmmss(ms) {
    const d = new Date(ms);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
  }

  const num = (x) => (typeof x === "number" && Number.isFinite(x) ? x : null);
  const mbit = (bps) => (num(bps) === null ? "–" : (bps / 1e6).toFixed(2));
  const count = (x) => (num(x) === null ? "–" : Math.round(x).toLocaleString("en-US"));
  const rate = (x) => (num(x) === null ? "–" : x < 10 ? x.toFixed(1) : Math.round(x).toString());

  function setText(el, text) {
    if (el && el.textContent !== text) el.textContent = text;
  }

  // Colour of a utilisation 0..1: green -> yellow -> red; null (no data) -> grey.
  function utilColour(u) {
    if (u === null) return "#b8c0c8";
    const x = Math.max(0, Math.min(1, u));
    const hue = 120 * (1 - x);
    const light = 45 - 8 * x;
    return `hsl(${hue.toFixed(0)}, 75%, ${light.toFixed(0)}%)`;
  }

  // ---------- topology ----------
  function roleOf(sw) {
    if (sw.role) return sw.role;
    return String(sw.name).startsWith("sp") ? "spine" : "leaf";
  }

  function setTopology(topo) {
    const sig = JSON.stringify([
      (topo.switches || []).map((s) => [s.name, roleOf(s), s.connected !== false]),
      (topo.hosts || []).map((h) => [h.name, h.leaf, h.port, !!h.ps]),
      (topo.links || []).map((l) => [l.a, l.a_port, l.b, l.b_port]),
      topo.ps_host,
      topo.ps_port,
    ]);
    state.topoFetchedAt = Date.now();
    if (sig === state.topoSig) return;
    state.topo = topo;
    state.topoSig = sig;
    const pp = topo.ps_port;
    if (pp && pp.switch) {
      state.psKey = portKey(pp.switch, pp.port);
    } else {
      const ps = (topo.hosts || []).find((h) => h.ps || h.name === topo.ps_host);
      state.psKey = ps ? portKey(ps.leaf, ps.port) : null;
    }
    drawFabric(topo);
  }

  // Layout: spines top row, leaves middle, each leaf's hosts in a block under it. Sizes are in
  // viewBox units; the SVG scales to its container, so a 32-host fabric shrinks instead of overflowing.
  function layout(topo) {
    const switches = topo.switches || [];
    const spines = switches.filter((s) => roleOf(s) === "spine").sort((a, b) => natural(a.name, b.name));
    const leaves = switches.filter((s) => roleOf(s) !== "spine").sort((a, b) => natural(a.name, b.name));
    const hostsByLeaf = new Map(leaves.map((l) => [l.name, []]));
    const orphans = [];
    for (const h of topo.hosts || []) {
      if (hostsByLeaf.has(h.leaf)) hostsByLeaf.get(h.leaf).push(h);
      else orphans.push(h);
    }
    for (const list of hostsByLeaf.values()) list.sort((a, b) => natural(a.name, b.name));

    const HOST_GAP = 32; // host circles r=12, labels "h32" ~22 units wide
    const BLOCK_PAD = 18;
    const MARGIN = 30;
    const blocks = leaves.map((l) => Math.max(hostsByLeaf.get(l.name).length, 1) * HOST_GAP + BLOCK_PAD);
    const hostsW = blocks.reduce((a, b) => a + b, 0) + orphans.length * HOST_GAP;
    const W = Math.max(900, hostsW + 2 * MARGIN, spines.length * 100 + 2 * MARGIN);
    const H = 400;
    const Y = { spine: 50, leaf: 205, host: 330 };
    const pos = new Map(); // name -> {x, y, w, h, kind}

    const spineSlot = (W - 2 * MARGIN) / Math.max(spines.length, 1);
    const spineW = Math.min(90, spineSlot - 16);
    spines.forEach((s, i) => pos.set(s.name, { x: MARGIN + (i + 0.5) * spineSlot, y: Y.spine, w: spineW, h: 30 }));

    let x0 = MARGIN + (W - 2 * MARGIN - hostsW) / 2;
    leaves.forEach((l, i) => {
      const bw = blocks[i];
      pos.set(l.name, { x: x0 + bw / 2, y: Y.leaf, w: Math.min(90, bw - 14), h: 30 });
      const hs = hostsByLeaf.get(l.name);
      hs.forEach((h, k) => pos.set(h.name, { x: x0 + BLOCK_PAD / 2 + (k + 0.5) * HOST_GAP, y: Y.host, r: 12 }));
      x0 += bw;
    });
    orphans.forEach((h) => {
      pos.set(h.name, { x: x0 + HOST_GAP / 2, y: Y.host, r: 12 });
      x0 += HOST_GAP;
    });
    return { W, H, spines, leaves, hosts: [...hostsByLeaf.values()].flat().concat(orphans), pos };
  }

  // A link, oriented switch-first for host links and leaf-first for uplinks, with its test id.
  function orientLink(l, hostNames, spineNames) {
    let { a, a_port: ap, b, b_port: bp } = l;
    if (hostNames.has(a) || (spineNames.has(a) && !hostNames.has(b))) [a, ap, b, bp] = [b, bp, a, ap];
    const id = hostNames.has(b) ? `${a}:${ap}-${b}` : `${a}:${ap}-${b}:${bp}`;
    return { a, ap, b, bp, id, host: hostNames.has(b), rate: num(l.rate_mbit) };
  }

  function drawFabric(topo) {
    const fab = $("fabric");
    const L = layout(topo);
    fab.replaceChildren();
    fab.setAttribute("viewBox", `0 0 ${L.W} ${L.H}`);
    const hostNames = new Set(L.hosts.map((h) => h.name));
    const spineNames = new Set(L.spines.map((s) => s.name));
    const gLinks = svg("g", { class: "links" }, fab);
    const gNodes = svg("g", { class: "nodes" }, fab);
    const gPorts = svg("g", { class: "ports" }, fab);

    const links = (topo.links || []).map((l) => orientLink(l, hostNames, spineNames))
      .filter((l) => L.pos.has(l.a) && L.pos.has(l.b));

    // Port positions: spread along the switch's top/bottom edge, ordered by the peer's x.
    const ends = new Map(); // switch -> [{link, port, peer, up}]
    const addEnd = (sw, port, peer, link) => {
      if (hostNames.has(sw)) return;
      const up = L.pos.get(peer).y < L.pos.get(sw).y;
      if (!ends.has(sw)) ends.set(sw, []);
      ends.get(sw).push({ link, port, peer, up });
    };
    for (const l of links) {
      addEnd(l.a, l.ap, l.b, l);
      addEnd(l.b, l.bp, l.a, l);
    }
    const portXY = new Map(); // "sw:port" -> {x, y}
    for (const [sw, list] of ends) {
      const p = L.pos.get(sw);
      for (const up of [true, false]) {
        const side = list.filter((e) => e.up === up).sort((e1, e2) => L.pos.get(e1.peer).x - L.pos.get(e2.peer).x);
        side.forEach((e, k) => {
          portXY.set(portKey(sw, e.port), {
            x: p.x - p.w / 2 + ((k + 0.5) * p.w) / side.length,
            y: up ? p.y - p.h / 2 : p.y + p.h / 2,
          });
        });
      }
    }
    const endXY = (name, port) => {
      const key = portKey(name, port);
      if (portXY.has(key)) return portXY.get(key);
      const p = L.pos.get(name);
      return { x: p.x, y: p.y - (p.r || 0) };
    };

    for (const l of links) {
      const pa = endXY(l.a, l.ap);
      const pb = endXY(l.b, l.bp);
      const line = svg("line", {
        x1: pa.x, y1: pa.y, x2: pb.x, y2: pb.y, class: `link ${l.host ? "host-link" : "uplink"}`,
        "data-kind": "link", "data-link": l.id, "data-a": l.a, "data-a-port": l.ap, "data-b": l.b,
        "data-b-port": l.bp, "data-util": "", "data-dropping": "false",
      }, gLinks);
      line._link = l;
      svg("title", {}, line).textContent = l.id;
    }

    for (const s of [...L.spines, ...L.leaves]) {
      const p = L.pos.get(s.name);
      const g = svg("g", {
        class: `node switch ${roleOf(s)}${s.connected === false ? " disconnected" : ""}`,
        "data-kind": "switch", "data-name": s.name, "data-role": roleOf(s),
        "data-connected": String(s.connected !== false),
      }, gNodes);
      svg("rect", { x: p.x - p.w / 2, y: p.y - p.h / 2, width: p.w, height: p.h, rx: 5 }, g);
      svg("text", { x: p.x, y: p.y + 5, "text-anchor": "middle", class: "label" }, g).textContent = s.name;
      const dpid = num(s.dpid) === null ? "" : ` dpid 0x${s.dpid.toString(16)}`;
      svg("title", {}, g).textContent = `${s.name} (${roleOf(s)}${dpid})${s.connected === false ? " disconnected" : ""}`;
    }

    for (const h of L.hosts) {
      const p = L.pos.get(h.name);
      const isPs = !!h.ps || h.name === topo.ps_host;
      const g = svg("g", {
        class: `node host${isPs ? " ps" : ""}`, "data-kind": "host", "data-name": h.name,
        "data-ps": String(isPs),
      }, gNodes);
      svg("circle", { cx: p.x, cy: p.y, r: p.r }, g);
      if (isPs) svg("text", { x: p.x, y: p.y + 4, "text-anchor": "middle", class: "ps-tag" }, g).textContent = "PS";
      svg("text", { x: p.x, y: p.y + p.r + 16, "text-anchor": "middle", class: "label host-label" }, g)
        .textContent = h.name;
      svg("title", {}, g).textContent = `${h.name} ${h.ip || ""} ${h.mac || ""} on ${h.leaf}:${h.port}${isPs ? " — PS" : ""}`;
    }

    for (const [key, xy] of portXY) {
      const [sw, port] = key.split(":");
      const g = svg("g", {
        class: "port", "data-kind": "port", "data-port": key, "data-switch": sw, "data-port-no": port,
        "data-dropping": "false", "data-ps-port": String(key === state.psKey),
      }, gPorts);
      svg("circle", { cx: xy.x, cy: xy.y, r: 9, class: "ring" }, g);
      svg("circle", { cx: xy.x, cy: xy.y, r: 3.5, class: "dot" }, g);
      svg("title", {}, g).textContent = `${sw}-eth${port}`;
    }

    setText($("fabric-size"), `${L.spines.length} spines × ${L.leaves.length} leaves, ${L.hosts.length} hosts`);
    const ps = L.hosts.find((h) => h.ps || h.name === topo.ps_host);
    setText($("ps-name"), ps ? ps.name : topo.ps_host || "–");
    setText($("ps-port"), state.psKey ? state.psKey.replace(":", "-eth") : "–");
    paintFabric();
  }

  // ---------- live data ----------
  function linkUtil(l) {
    let best = null;
    for (const [sw, port] of [[l.a, l.ap], [l.b, l.bp]]) {
      const e = state.ports.get(portKey(sw, port));
      if (!e) continue;
      const cap = l.rate ? l.rate * 1e6 : null;
      const tx = num(e.util) ?? (cap && num(e.tx_bps) !== null ? e.tx_bps / cap : null);
      const rx = cap && num(e.rx_bps) !== null ? e.rx_bps / cap : null;
      for (const u of [tx, rx]) if (u !== null) best = Math.max(best ?? 0, u);
    }
    return best;
  }

  function computeDrops(fresh) {
    const byPort = new Map();
    for (const q of state.queues.values()) {
      const key = portKey(q.switch, q.port);
      const d = byPort.get(key) || { dps: 0, total: 0, queues: 0 };
      d.dps += num(q.drops_per_s) ?? 0;
      d.total += num(q.drops) ?? 0;
      d.queues += 1;
      byPort.set(key, d);
    }
    const keys = new Set([...state.ports.keys(), ...byPort.keys()]);
    const out = new Map();
    for (const key of keys) {
      const d = byPort.get(key) || { dps: 0, total: 0, queues: 0 };
      const txDropped = num(state.ports.get(key)?.tx_dropped) ?? 0;
      const total = d.total + txDropped;
      const prev = state.prevTotals.get(key);
      const prevDropping = state.portDrops.get(key)?.dropping ?? false;
      // drops_per_s > 0 in the last sample, or counters grew since the previous fresh sample
      const increasing = fresh ? prev !== undefined && total > prev : prevDropping; // same data: keep
      if (fresh) state.prevTotals.set(key, total);
      out.set(key, { dps: d.dps, total: d.total, txDropped, queues: d.queues, dropping: d.dps > 0 || increasing });
    }
    state.portDrops = out;
  }

  function paintFabric() {
    const fab = $("fabric");
    for (const line of fab.querySelectorAll("[data-kind=link]")) {
      const l = line._link;
      const u = linkUtil(l);
      const dropping = [portKey(l.a, l.ap), portKey(l.b, l.bp)].some((k) => state.portDrops.get(k)?.dropping);
      line.setAttribute("stroke", utilColour(u));
      line.setAttribute("stroke-width", (2 + 5 * Math.min(1, u ?? 0)).toFixed(1));
      line.setAttribute("data-util", u === null ? "" : u.toFixed(3));
      line.setAttribute("data-dropping", String(dropping));
      line.classList.toggle("nodata", u === null);
      line.querySelector("title").textContent =
        `${l.id}: ${u === null ? "no data" : (100 * u).toFixed(1) + " %"}${l.rate ? ` of ${l.rate} Mbit/s` : ""}` +
        (dropping ? " — dropping" : "");
    }
    for (const g of fab.querySelectorAll("[data-kind=port]")) {
      const key = g.getAttribute("data-port");
      const d = state.portDrops.get(key);
      const e = state.ports.get(key);
      const dropping = !!d?.dropping;
      g.setAttribute("data-dropping", String(dropping));
      g.classList.toggle("dropping", dropping);
      g.classList.toggle("nodata", !e && !d);
      g.querySelector("title").textContent = `${key.replace(":", "-eth")}` +
        (e ? ` tx ${mbit(e.tx_bps)} rx ${mbit(e.rx_bps)} Mbit/s` : " no data") +
        (d ? `, drops ${rate(d.dps)}/s, total ${count(d.total + d.txDropped)}` : "");
    }
  }

  function rowFor(tbody, rows, key, cells) {
    let tr = rows.get(key);
    if (!tr) {
      tr = document.createElement("tr");
      for (const c of cells) {
        const td = document.createElement("td");
        td.className = c;
        tr.appendChild(td);
      }
      rows.set(key, tr);
    }
    return tr;
  }

  const portRows = new Map();
  const queueRows = new Map();
  const sortKeys = (keys) =>
    [...keys].sort((a, b) => (a === state.psKey ? -1 : b === state.psKey ? 1 : natural(a, b)));

  function paintTables() {
    const pb = $("ports-table").tBodies[0];
    const cells = ["c-name", "c-peer", "c-tx num", "c-rx num", "c-util num", "c-dps num", "c-drops num", "c-txdrop num"];
    const keys = sortKeys(state.ports.keys());
    const wanted = [];
    for (const key of keys) {
      const e = state.ports.get(key);
      const d = state.portDrops.get(key) || { dps: 0, total: 0, txDropped: 0, dropping: false, queues: 0 };
      const tr = rowFor(pb, portRows, key, cells);
      tr.dataset.port = key;
      tr.dataset.dropping = String(d.dropping);
      tr.classList.toggle("dropping", d.dropping);
      tr.classList.toggle("ps", key === state.psKey);
      const td = tr.children;
      setText(td[0], e.name || key);
      setText(td[1], e.peer || "");
      setText(td[2], mbit(e.tx_bps));
      setText(td[3], mbit(e.rx_bps));
      setText(td[4], num(e.util) === null ? "–" : `${(100 * e.util).toFixed(1)} %`);
      setText(td[5], d.queues ? rate(d.dps) : "–");
      setText(td[6], d.queues ? count(d.total) : "–");
      setText(td[7], count(e.tx_dropped));
      wanted.push(tr);
    }
    syncRows(pb, portRows, wanted);

    const qb = $("queues-table").tBodies[0];
    const qcells = ["c-name", "c-peer", "c-tx num", "c-dps num", "c-drops num"];
    const qwanted = [];
    const qkeys = [...state.queues.keys()].sort((a, b) => {
      const pa = a.slice(0, a.lastIndexOf(":"));
      const pbk = b.slice(0, b.lastIndexOf(":"));
      if (pa !== pbk) return pa === state.psKey ? -1 : pbk === state.psKey ? 1 : natural(a, b);
      return natural(a, b);
    });
    for (const key of qkeys) {
      const q = state.queues.get(key);
      const tr = rowFor(qb, queueRows, key, qcells);
      const dropping = (num(q.drops_per_s) ?? 0) > 0;
      tr.dataset.queue = key;
      tr.dataset.dropping = String(dropping);
      tr.classList.toggle("dropping", dropping);
      tr.classList.toggle("ps", key.startsWith(`${state.psKey}:`));
      const td = tr.children;
      setText(td[0], `${q.name || portKey(q.switch, q.port)} q${q.queue_id}`);
      setText(td[1], q.peer || "");
      setText(td[2], mbit(q.tx_bps));
      setText(td[3], rate(q.drops_per_s));
      setText(td[4], count(q.drops));
      qwanted.push(tr);
    }
    syncRows(qb, queueRows, qwanted);
  }

  const flowRows = new Map();
  const FLOW_TOP = 10; // rows of the top-flows table
  const DECISIONS = 20; // newest routing decisions shown
  const ROUTING_EVENTS = new Set(["flow_pinned", "flow_moved"]);

  function paintFlows(flows) {
    const tb = $("flows-table").tBodies[0];
    const cells = ["c-flow mono", "c-hosts", "c-path", "c-rate num", "c-bytes num", "c-age num"];
    const wanted = [];
    for (const f of flows) {
      const tr = rowFor(tb, flowRows, f.flow, cells);
      tr.dataset.flow = f.flow;
      const td = tr.children;
      setText(td[0], f.flow);
      setText(td[1], `${f.src || f.src_ip} → ${f.dst || f.dst_ip}`);
      const via = f.spine || (f.leaf === f.dst_leaf ? "same leaf" : "–");
      setText(td[2], `${f.leaf} ${via}${f.pinned ? " (pinned)" : ""}`);
      setText(td[3], mbit(f.rate_bps));
      setText(td[4], num(f.bytes) === null ? "–" : (f.bytes / 1e6).toFixed(2));
      setText(td[5], num(f.age_s) === null ? "–" : f.age_s.toFixed(1));
      wanted.push(tr);
    }
    syncRows(tb, flowRows, wanted);
  }

  function paintDecisions(events) {
    const tb = $("routing-table").tBodies[0];
    const rows = events.filter((e) => ROUTING_EVENTS.has(e.event)).slice(-DECISIONS).reverse();
    tb.replaceChildren(
      ...rows.map((e) => {
        const tr = document.createElement("tr");
        tr.dataset.event = e.event;
        for (const text of [
          hhmmss(1000 * e.t),
          e.event,
          e.flow,
          `${e.old_path || "hash"} → ${e.new_path}`,
          e.why || "",
        ]) {
          const td = document.createElement("td");
          td.textContent = text;
          tr.appendChild(td);
        }
        return tr;
      }),
    );
  }

  function syncRows(tbody, rows, wanted) {
    const keep = new Set(wanted);
    for (const [key, tr] of rows) {
      if (!keep.has(tr)) {
        tr.remove();
        rows.delete(key);
      }
    }
    wanted.forEach((tr, i) => {
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
    });
  }

  function paintLive() {
    const e = state.psKey ? state.ports.get(state.psKey) : null;
    const d = state.psKey ? state.portDrops.get(state.psKey) : null;
    const r = $("ps-rate");
    setText(r, e ? mbit(e.tx_bps) : "–");
    r.dataset.value = e && num(e.tx_bps) !== null ? String(e.tx_bps) : "";
    const dps = $("ps-drops");
    setText(dps, d ? rate(d.dps) : "–");
    dps.dataset.value = d ? String(d.dps) : "";
    dps.classList.toggle("dropping", !!d?.dropping);
    const tot = $("ps-drops-total");
    setText(tot, d ? count(d.total + d.txDropped) : "–");
    tot.dataset.value = d ? String(d.total + d.txDropped) : "";
    if (state.lastT !== null) {
      const u = $("updated");
      setText(u, hhmmss(state.lastT * 1000));
      u.dataset.t = String(state.lastT);
      u.setAttribute("datetime", new Date(state.lastT * 1000).toISOString());
    }
  }

  function paintPhase(ph) {
    const el = $("phase");
    if (!ph) {
      el.dataset.state = "unknown";
      setText($("phase-strategy"), "–");
      setText($("phase-step"), "–");
      setText($("phase-state"), "no experiment");
      return;
    }
    el.dataset.state = String(ph.state || "unknown");
    setText($("phase-strategy"), ph.strategy ? String(ph.strategy) : "–");
    const step = num(ph.step);
    const steps = num(ph.steps);
    const none = step === null || (ph.state === "idle" && !steps);
    setText($("phase-step"), none ? "–" : steps === null ? String(step) : `${step}/${steps}`);
    setText($("phase-state"), String(ph.state || "unknown"));
  }

  // ---------- time series ----------
  function addSamples(samples) {
    if (!state.psKey) return;
    const dropGroups = new Map();
    for (const s of samples) {
      if (num(s.t) === null || portKey(s.switch, s.port) !== state.psKey) continue;
      if (s.kind === "port") state.rateSeries.set(s.t, { t: s.t, tx: num(s.tx_bps), rx: num(s.rx_bps) });
      else if (s.kind === "queue") dropGroups.set(s.t, (dropGroups.get(s.t) ?? 0) + (num(s.drops_per_s) ?? 0));
    }
    for (const [t, dps] of dropGroups) state.dropSeries.set(t, { t, dps });
  }

  function pruneSeries() {
    const tMax = state.lastT ?? Date.now() / 1000;
    for (const m of [state.rateSeries, state.dropSeries]) {
      for (const t of m.keys()) if (t < tMax - WINDOW_S - 5) m.delete(t);
    }
  }

  function seriesSince() {
    const last = [state.rateSeries, state.dropSeries].map((m) => (m.size ? Math.max(...m.keys()) : null));
    if (last.every((t) => t !== null)) return Math.min(...last) - 2; // overlap; duplicates are merged
    return (state.lastT ?? Date.now() / 1000) - WINDOW_S;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // Line chart of [{colour, cls, points: [[t, v]]}] over the last WINDOW_S seconds up to tMax.
  function drawChart(el, lines, tMax, yFloor) {
    const W = Math.max(300, Math.round(el.getBoundingClientRect().width) || 600); // 1 unit = 1 px
    const H = 170;
    el.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const m = { l: 46, r: 10, t: 10, b: 24 };
    const pw = W - m.l - m.r;
    const ph = H - m.t - m.b;
    let vmax = yFloor || 0;
    for (const ln of lines) for (const [, v] of ln.points) if (v !== null) vmax = Math.max(vmax, v);
    const ymax = niceMax(vmax);
    const xOf = (t) => m.l + pw * (1 - (tMax - t) / WINDOW_S);
    const yOf = (v) => m.t + ph * (1 - v / ymax);
    el.replaceChildren();
    const axes = svg("g", { class: "axes" }, el);
    for (let i = 0; i <= 4; i++) {
      const v = (ymax * i) / 4;
      const y = yOf(v);
      svg("line", { x1: m.l, x2: W - m.r, y1: y, y2: y, class: "grid" }, axes);
      svg("text", { x: m.l - 6, y: y + 4, "text-anchor": "end" }, axes).textContent =
        v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1).replace(/\.0$/, "") : v.toFixed(2).replace(/\.?0+$/, "");
    }
    for (let s = 0; s <= WINDOW_S; s += 10) {
      const x = xOf(tMax - WINDOW_S + s);
      svg("line", { x1: x, x2: x, y1: m.t, y2: H - m.b, class: "grid" }, axes);
      svg("text", { x, y: H - 6, "text-anchor": "middle" }, axes).textContent =
        s === WINDOW_S ? "now" : `-${WINDOW_S - s}s`;
    }
    let total = 0;
    for (const ln of lines) {
      const pts = ln.points.filter(([t, v]) => v !== null && t >= tMax - WINDOW_S && t <= tMax);
      total = Math.max(total, pts.length);
      if (pts.length === 0) continue;
      const d = pts.map(([t, v], i) => `${i ? "L" : "M"}${xOf(t).toFixed(1)},${yOf(v).toFixed(1)}`).join("");
      svg("path", { d, class: `series ${ln.cls}`, fill: "none" }, el);
    }
    if (total === 0) {
      svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "placeholder" }, el).textContent = "no data yet";
    }
    el.setAttribute("data-points", String(total));
    el.setAttribute("data-ymax", String(ymax));
  }

  function paintCharts() {
    const tMax = state.lastT ?? Date.now() / 1000;
    const rs = [...state.rateSeries.values()].sort((a, b) => a.t - b.t);
    const ds = [...state.dropSeries.values()].sort((a, b) => a.t - b.t);
    const psLink = state.topo && (state.topo.links || []).find((l) =>
      portKey(l.a, l.a_port) === state.psKey || portKey(l.b, l.b_port) === state.psKey);
    drawChart($("chart-rate"), [
      { cls: "tx", points: rs.map((p) => [p.t, p.tx === null ? null : p.tx / 1e6]) },
      { cls: "rx", points: rs.map((p) => [p.t, p.rx === null ? null : p.rx / 1e6]) },
    ], tMax, psLink ? num(psLink.rate_mbit) : 0);
    drawChart($("chart-drops"), [{ cls: "drops", points: ds.map((p) => [p.t, p.dps]) }], tMax, 1);
  }

  // ---------- staleness ----------
  function updateStale() {
    const now = Date.now();
    const since = state.lastFreshWall ?? state.startedWall;
    const stale = now - since > STALE_MS || state.failures >= 2;
    const banner = $("stale");
    if (banner.hidden === stale) banner.hidden = !stale;
    document.body.classList.toggle("is-stale", stale);
    document.body.dataset.stale = String(stale);
    if (stale) {
      const t = $("stale-since");
      setText(t, hhmmss(since));
      t.setAttribute("datetime", new Date(since).toISOString());
      setText($("stale-reason"), state.lastError ? `(${state.lastError})` :
        state.lastFreshWall ? "(data timestamp not advancing)" : "(no data yet)");
    }
  }

  // ---------- polling ----------
  async function poll() {
    if (!state.topo || Date.now() - state.topoFetchedAt > TOPO_REFRESH_MS) {
      try {
        setTopology(await fetchJSON("/api/topology"));
      } catch (err) {
        state.topoFetchedAt = Date.now() - TOPO_REFRESH_MS + 2000; // retry soon
        if (!state.topo) {
          state.failures += 1;
          state.lastError = String(err.message || err);
          return;
        }
      }
    }
    const [ports, queues, phase, ts, flows, events] = await Promise.allSettled([
      fetchJSON("/api/ports"),
      fetchJSON("/api/queues"),
      fetchJSON("/api/phase"),
      fetchJSON(`/api/timeseries?since=${seriesSince().toFixed(3)}`),
      fetchJSON(`/api/flows?top=${FLOW_TOP}`),
      fetchJSON("/api/events"),
    ]);
    if (ports.status === "rejected") {
      state.failures += 1;
      state.lastError = String(ports.reason?.message || ports.reason);
      return;
    }
    state.failures = 0;
    state.lastError = "";
    const t = num(ports.value.t);
    const fresh = t !== null && (state.lastT === null || t > state.lastT);
    if (fresh) {
      state.lastT = t;
      state.lastFreshWall = Date.now();
    }
    state.ports = new Map((ports.value.ports || [])
      .filter((p) => num(p.port) !== null && p.port < LOCAL_PORT_MIN)
      .map((p) => [portKey(p.switch, p.port), p]));
    if (queues.status === "fulfilled") {
      state.queues = new Map((queues.value.queues || []).map((q) => [`${q.switch}:${q.port}:${q.queue_id}`, q]));
    }
    computeDrops(fresh);
    if (ts.status === "fulfilled") {
      addSamples(ts.value.samples || []);
    } else if (fresh) {
      // no time series: chart from the live documents instead
      const e = state.ports.get(state.psKey);
      if (e) state.rateSeries.set(t, { t, tx: num(e.tx_bps), rx: num(e.rx_bps) });
      const d = state.portDrops.get(state.psKey);
      if (d && d.queues) state.dropSeries.set(t, { t, dps: d.dps });
    }
    pruneSeries();
    paintPhase(phase.status === "fulfilled" ? phase.value : null);
    paintFabric();
    paintTables();
    if (flows.status === "fulfilled") paintFlows(flows.value.flows || []);
    if (events.status === "fulfilled") paintDecisions(events.value.events || []);
    paintLive();
    paintCharts();
  }

  async function loop() {
    const started = Date.now();
    try {
      await poll();
    } catch (err) {
      state.failures += 1;
      state.lastError = String(err.message || err);
      console.error("dashboard poll:", err);
    }
    updateStale();
    setTimeout(loop, Math.max(100, POLL_MS - (Date.now() - started)));
  }

  document.addEventListener("DOMContentLoaded", () => {
    setInterval(updateStale, 500); // the banner shows even while a fetch hangs
    loop();
  });
})();
