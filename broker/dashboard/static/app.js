// The dashboard page: polls the broker's JSON documents every 2 s and renders them.
// A topic's and a group's rates are the broker's (its sampler's, over the last 10 s); a queue's
// is the difference of two polls divided by their interval. The chart keeps the last
// HISTORY points of each group in memory and is drawn on a <canvas> here.
"use strict";

(function () {
  const POLL_MS = 2000;
  const HISTORY = 90;
  const MIN_SPAN = 16;
  const DOCS = ["broker", "store", "topics", "groups", "connections"];
  let previous = null; // the documents of the poll before
  let selected = null; // the group shown in the chart
  const history = new Map(); // group -> [{t, lag, sent}]

  const $ = (id) => document.getElementById(id);

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  function fmt(n) {
    return Number(n).toLocaleString("en-US");
  }

  function rate(value) {
    return value === null ? "–" : value.toFixed(value < 10 ? 1 : 0);
  }

  function perSecond(now, before, nowMs, beforeMs) {
    if (before === undefined || before === null || nowMs <= beforeMs) return null;
    return Math.max(0, ((now - before) * 1000) / (nowMs - beforeMs));
  }

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  }

  function time(ms) {
    return ms ? new Date(ms).toLocaleTimeString("en-GB") : "–";
  }

  function facts(dl, pairs) {
    const items = [];
    for (const [name, value, cls] of pairs) {
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      dd.textContent = value;
      if (cls) dd.className = cls;
      items.push(dt, dd);
    }
    dl.replaceChildren(...items);
  }

  function omitted(id, doc, what) {
    $(id).textContent = doc.omitted
      ? `${doc.omitted} more ${what} not listed (at most ${doc.limit ?? doc.omitted} shown)`
      : "";
  }

  function renderBroker(b) {
    $("broker-name").textContent = `${b.cluster} / ${b.broker_name}`;
    facts($("broker-facts"), [
      ["Cluster", b.cluster],
      ["Broker", `${b.broker_name} at ${b.broker_addr}`],
      ["Version", b.version],
      ["Role", `${b.role}, ${b.flush_disk_type}`],
      ["Permission", b.permission, b.permission === "RW" ? "" : "bad"],
      ["ACL", b.acl_enable ? "on" : "off"],
      ["Topics", fmt(b.topics)],
      ["Consumer groups (live)", fmt(b.consumer_groups)],
      ["Producer groups (live)", fmt(b.producer_groups)],
      ["Connections", `${fmt(b.connections)} open, ${fmt(b.refused_connections)} refused`],
    ]);
  }

  function renderStore(s) {
    facts($("store-facts"), [
      ["Segments", `${fmt(s.segments)} of ${bytes(s.segment_size)}`],
      ["Written offset", fmt(s.written_offset)],
      ["Flushed offset", fmt(s.flushed_offset)],
      ["Not yet flushed", bytes(s.unflushed_bytes)],
      ["Oldest offset kept", fmt(s.min_offset)],
      ["Disk used", `${(s.disk_ratio * 100).toFixed(1)} %`, s.disk_ratio > 0.85 ? "bad" : ""],
      ["Writer queue", fmt(s.writer_queue_depth)],
      ["Writeable", s.writeable ? "yes" : "NO", s.writeable ? "" : "bad"],
      ["Flags", s.flags.length ? s.flags.join(", ") : "none", s.flags.length ? "bad" : ""],
    ]);
  }

  function renderTopics(doc, before) {
    const showSystem = $("show-system").checked;
    const old = new Map((before ? before.topics : []).map((t) => [t.topic, t]));
    const dt = before ? [doc.now_ms, before.now_ms] : [0, 0];
    const rows = [];
    for (const t of doc.topics) {
      if (t.system && !showSystem) continue;
      const prior = old.get(t.topic);
      const oldQueues = new Map((prior ? prior.queues : []).map((q) => [q.queue_id, q]));
      const tr = document.createElement("tr");
      tr.dataset.topic = t.topic;
      cell(tr, t.topic);
      cell(tr, `${t.read_queues}/${t.write_queues}`, "num");
      cell(tr, t.perm);
      cell(tr, fmt(t.messages), "num");
      cell(tr, fmt(t.max_offset_total), "num");
      cell(tr, rate(t.send_tps), "num"); // the broker's own rate, not a difference of polls
      const used = t.queues.filter((q) => q.max_offset > 0);
      const queues = used.map((q) => {
        const r = perSecond(q.max_offset, oldQueues.get(q.queue_id)?.max_offset, ...dt);
        return `${q.queue_id}: ${q.min_offset}–${q.max_offset}` + (r ? ` (${rate(r)}/s)` : "");
      });
      const empty = t.queues.length - used.length;
      if (empty) queues.push(`(${empty} empty)`);
      if (t.queues_omitted) queues.push(`+${t.queues_omitted} queues not listed`);
      cell(tr, queues.join(", "), "queues");
      rows.push(tr);
    }
    fill($("topics-table").tBodies[0], rows);
    omitted("topics-note", doc, "topics");
  }

  function renderGroups(doc) {
    if (!doc.groups.some((g) => g.group === selected)) {
      selected = doc.groups.length ? doc.groups[0].group : null;
    }
    const rows = [];
    for (const g of doc.groups) {
      // the broker's own rates (its sampler's), so the chart needs no earlier poll
      const sent = g.send_tps;
      const consumed = g.consume_tps;
      const points = history.get(g.group) ?? [];
      points.push({ t: doc.now_ms, lag: g.lag, sent });
      history.set(g.group, points.slice(-HISTORY));
      const tr = document.createElement("tr");
      tr.dataset.group = g.group;
      if (g.group === selected) tr.className = "selected";
      tr.addEventListener("click", () => {
        selected = g.group;
        for (const r of rows) r.className = r.dataset.group === selected ? "selected" : "";
        showGroup(selected);
      });
      cell(tr, g.group);
      cell(tr, g.topics.join(", "));
      cell(tr, fmt(g.clients), "num");
      cell(tr, fmt(g.broker_offset_total), "num");
      cell(tr, fmt(g.consumer_offset_total), "num");
      cell(tr, fmt(g.lag), g.lag > 0 ? "num lagging" : "num");
      cell(tr, rate(sent), "num");
      cell(tr, rate(consumed), "num");
      rows.push(tr);
    }
    for (const name of [...history.keys()]) {
      if (!doc.groups.some((g) => g.group === name)) history.delete(name);
    }
    fill($("groups-table").tBodies[0], rows);
    omitted("groups-note", doc, "groups");
  }

  // The selected group's queues come from its own document: it reads their store times.
  async function showGroup(name) {
    if (name === null) {
      renderGroupDetail(null);
      return;
    }
    const detail = await fetchDoc(`group.json?group=${encodeURIComponent(name)}`);
    if (detail.group === selected) renderGroupDetail(detail);
  }

  function renderGroupDetail(group) {
    $("group-detail").hidden = !group;
    if (!group) return;
    $("chart-group").textContent = group.group;
    const rows = group.queues.map((q) => {
      const tr = document.createElement("tr");
      cell(tr, q.topic);
      cell(tr, String(q.queue_id), "num");
      cell(tr, fmt(q.broker_offset), "num");
      cell(tr, fmt(q.consumer_offset), "num");
      cell(tr, fmt(q.lag), q.lag > 0 ? "num lagging" : "num");
      cell(tr, time(q.last));
      return tr;
    });
    if (group.queues_omitted) {
      const tr = document.createElement("tr");
      cell(tr, `${group.queues_omitted} more queues not listed`).colSpan = 6;
      rows.push(tr);
    }
    fill($("queues-table").tBodies[0], rows);
    drawChart($("chart"), history.get(group.group) ?? []);
  }

  // The smallest 1, 2 or 5 times a power of ten, times 4 (one per grid line), >= value.
  function niceCeil(value) {
    const step = Math.max(value, 1) / 4;
    const power = 10 ** Math.floor(Math.log10(step));
    const nice = [1, 2, 5, 10].find((m) => m * power >= step);
    return nice * power * 4;
  }

  function drawChart(canvas, points) {
    const ctx = canvas.getContext("2d");
    const w = canvas.width;
    const h = canvas.height;
    const pad = { l: 56, r: 56, t: 12, b: 22 };
    ctx.clearRect(0, 0, w, h);
    ctx.font = "11px system-ui, sans-serif";
    const maxLag = niceCeil(Math.max(...points.map((p) => p.lag)));
    const maxSent = niceCeil(Math.max(...points.map((p) => p.sent)));
    // The x axis spans the points kept so far (at least MIN_SPAN polls), up to HISTORY.
    const span = Math.max(points.length, MIN_SPAN);
    const x = (i) => pad.l + ((w - pad.l - pad.r) * i) / (span - 1);
    const y = (v, max) => h - pad.b - ((h - pad.t - pad.b) * v) / max;
    ctx.strokeStyle = "#e3e7ee";
    ctx.fillStyle = "#5b6478";
    for (let k = 0; k <= 4; k += 1) {
      const yy = y((maxLag * k) / 4, maxLag);
      ctx.beginPath();
      ctx.moveTo(pad.l, yy);
      ctx.lineTo(w - pad.r, yy);
      ctx.stroke();
      ctx.textAlign = "right";
      ctx.fillText(fmt(Math.round((maxLag * k) / 4)), pad.l - 6, yy + 4);
      ctx.textAlign = "left";
      ctx.fillText(fmt((maxSent * k) / 4), w - pad.r + 6, yy + 4);
    }
    ctx.textAlign = "left";
    ctx.fillText(`last ${((span - 1) * POLL_MS) / 1000} s`, pad.l, h - 6);
    const offset = span - points.length;
    const line = (key, max, colour) => {
      ctx.strokeStyle = colour;
      ctx.lineWidth = 2;
      ctx.beginPath();
      points.forEach((p, i) => {
        const fn = i ? ctx.lineTo : ctx.moveTo;
        fn.call(ctx, x(offset + i), y(p[key], max));
      });
      ctx.stroke();
      ctx.lineWidth = 1;
    };
    line("sent", maxSent, "#2563c9");
    line("lag", maxLag, "#d0481f");
  }

  function renderConnections(doc) {
    const rows = doc.connections.map((c) => {
      const tr = document.createElement("tr");
      cell(tr, String(c.id), "num");
      cell(tr, c.remote);
      cell(tr, fmt(c.requests), "num");
      cell(tr, fmt(c.inflight), "num");
      cell(tr, c.consumer_groups.join(", "));
      cell(tr, c.producer_groups.join(", "));
      return tr;
    });
    fill($("connections-table").tBodies[0], rows);
    omitted("connections-note", doc, "connections");
  }

  let latest = null;

  function render() {
    if (!latest) return;
    renderBroker(latest.broker);
    renderStore(latest.store);
    renderTopics(latest.topics, previous?.topics);
    renderConnections(latest.connections);
  }

  async function fetchDoc(name) {
    const path = name.includes(".json") ? name : `${name}.json`;
    const response = await fetch(`/api/${path}`, { cache: "no-store" });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || `${name}: HTTP ${response.status}`);
    return body;
  }

  async function poll() {
    const status = $("status");
    try {
      const docs = await Promise.all(DOCS.map(fetchDoc));
      const next = Object.fromEntries(DOCS.map((name, i) => [name, docs[i]]));
      previous = latest;
      latest = next;
      render();
      renderGroups(latest.groups);
      await showGroup(selected);
      status.textContent = `updated ${time(latest.broker.now_ms)}, every ${POLL_MS / 1000} s`;
      status.className = "";
    } catch (err) {
      status.textContent = `cannot reach the broker: ${err.message}`;
      status.className = "error";
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("show-system").addEventListener("change", render);
    poll();
  });
})();
