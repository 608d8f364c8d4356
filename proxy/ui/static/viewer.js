// dressage-proxy trajectory viewer: plain JavaScript, no framework, no build step.
// Data: JSON under api/ (relative to /ui/): api/sessions and api/sessions/<percent-encoded id>.
// Routes: #/ (the session list) and #/session/<percent-encoded id> (one session).
// Every piece of data goes into the page as text (textContent), never as HTML.
"use strict";

(function () {
  const MASKED_BACKGROUND = "rgb(229, 231, 235)";
  const NO_LOGPROB_BACKGROUND = "rgb(191, 219, 254)";
  const HEAT_FLOOR = -5;  // logprobs at or below this get the reddest colour
  const VERSION_PALETTE = ["#2563eb", "#db2777", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#ca8a04", "#dc2626",
                           "#4b5563", "#0d9488"];
  const AUTO_REFRESH_MS = 2000;

  const $ = (id) => document.getElementById(id);
  let autoTimer = null;
  let routeTicket = 0;  // a newer navigation makes the answers of older ones stale

  // -- small DOM helpers ---------------------------------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = !message;
  }

  async function getJson(path) {
    const response = await fetch(path, { credentials: "same-origin", headers: { accept: "application/json" } });
    if (!response.ok) {
      let message = `${response.status} ${response.statusText}`;
      try {
        const body = await response.json();
        if (body && body.error && body.error.message) message += `: ${body.error.message}`;
      } catch (_) { /* not JSON */ }
      if (response.status === 401) {
        message += " (this proxy needs its admin key: reload and sign in with it as the password)";
      }
      throw new Error(message);
    }
    return response.json();
  }

  function sessionHref(id) { return "#/session/" + encodeURIComponent(id); }

  function fmt(value) {
    if (value === null || value === undefined) return "—";
    if (typeof value === "number") return value.toLocaleString("en-US");
    return String(value);
  }

  function setSource(source) {
    if (!source) return;
    const label = source.kind === "file" ? `file: ${source.label}` : source.label;
    $("source-label").textContent = label + (source.token_text ? "" : " · no tokenizer: ids only");
  }

  // -- the session list ----------------------------------------------------------------------------------------------

  function stateChip(state) { return el("span", `state state-${state}`, state); }

  function sessionRow(row) {
    const link = el("a", "session-row");
    link.href = sessionHref(row.session_id);
    link.dataset.sessionId = row.session_id;
    link.dataset.state = row.state;
    link.dataset.steps = row.steps ?? "";
    link.dataset.segments = row.segments ?? "";
    link.dataset.tokens = row.tokens ?? "";
    const sid = el("span", "sid", row.session_id);
    sid.title = row.session_id + (row.instance_id ? `  (instance ${row.instance_id})` : "");
    const state = el("span");
    state.append(stateChip(row.state));
    const segments = el("span", "num", fmt(row.segments));
    if (row.segments_preview) segments.append(el("span", "preview-mark", " preview"));
    link.append(sid, state, el("span", "num", fmt(row.steps)), segments, el("span", "num", fmt(row.tokens)),
                el("span", "num", fmt(row.in_flight)), el("span", "", row.finalize_reason || ""));
    return link;
  }

  async function showList() {
    const ticket = routeTicket;
    const data = await getJson("api/sessions");
    if (ticket !== routeTicket) return;
    $("list-view").hidden = false;
    $("session-view").hidden = true;
    setSource(data.source);
    const list = $("sessions");
    list.replaceChildren(...data.sessions.map(sessionRow));
    $("sessions-empty").hidden = data.sessions.length > 0;
    document.title = "dressage-proxy · sessions";
  }

  // -- the trie ------------------------------------------------------------------------------------------------------

  function trieNode(node, tipsByStep, branchLabel) {
    const item = el("div", "trie-node");
    item.dataset.role = node.role;
    item.dataset.checkpoint = node.checkpoint ? "true" : "false";
    item.dataset.children = String(node.children.length);
    item.dataset.depth = String(node.depth);
    item.dataset.pending = node.pending ? "true" : "false";
    if (branchLabel) item.dataset.branchLabel = branchLabel;
    if (node.step) item.dataset.stepId = String(node.step.step_id);

    const line = el("div", "node-line");
    line.append(el("span", "role", node.role));
    const preview = el("span", "preview", node.preview || (node.role === "assistant" ? "(empty answer)" : "(empty)"));
    preview.title = node.text || node.preview || "";
    line.append(preview);
    if (node.reasoning) line.append(el("span", "meta", "💭"));
    const mark = el("span", "checkpoint-mark", node.step ? `◆ step ${node.step.step_id}` : "◆");
    if (node.step) {
      const bits = [`step ${node.step.step_id}`, `finish: ${node.step.finish_reason ?? "?"}`];
      if (node.step.tokens !== null && node.step.tokens !== undefined) bits.push(`${node.step.tokens} tokens`);
      if (node.step.commits > 1) bits.push(`refreshed ${node.step.commits - 1}×`);
      if (node.step.generation_id) bits.push(node.step.generation_id);
      mark.title = bits.join(" · ");
    }
    line.append(mark);
    if (node.boundary) {
      const boundary = el("span", "boundary", node.boundary.reason);
      boundary.dataset.reason = node.boundary.reason;
      const detail = node.boundary.detail ? ` (${node.boundary.detail})` : "";
      boundary.title = "segment boundary: " + node.boundary.reason + detail;
      line.append(boundary);
    }
    for (const tid of (node.step && tipsByStep.get(node.step.step_id)) || []) {
      const chip = el("span", "tip-chip", "⟶ " + tid);
      chip.title = "this checkpoint is the last step of segment " + tid;
      chip.addEventListener("click", () => focusSegment(tid));
      line.append(chip);
    }
    item.append(line);

    if (node.children.length) {
      const children = el("div", "trie-children" + (node.children.length > 1 ? " branching" : ""));
      node.children.forEach((child, index) => {
        const label = node.children.length > 1 ? `branch ${index + 1}/${node.children.length}` : null;
        children.append(trieNode(child, tipsByStep, label));
      });
      item.append(children);
    }
    return item;
  }

  function drawTrie(trie, segments) {
    const box = $("trie");
    box.replaceChildren();
    if (!trie || !trie.contexts.length) {
      box.append(el("p", "empty", "No trie: this session holds no message (drained, aborted, or empty)."));
      return;
    }
    const tipsByStep = new Map();
    for (const segment of segments) {
      const list = tipsByStep.get(segment.tip_step) || [];
      list.push(segment.trajectory_id);
      tipsByStep.set(segment.tip_step, list);
    }
    if (trie.source === "segments") {
      const hint = "Rebuilt from the segments' messages (the session's own trie was freed at finalize).";
      box.append(el("p", "pane-hint", hint));
    }
    for (const context of trie.contexts) {
      const block = el("div", "trie-context");
      const head = el("div", "context-head");
      head.append("context · tools: ");
      head.append(el("code", "", context.tools && context.tools.length ? context.tools.join(", ") : "none"));
      const kwargs = Object.keys(context.template_kwargs || {});
      if (kwargs.length) {
        head.append(" · template kwargs: ");
        head.append(el("code", "", JSON.stringify(context.template_kwargs)));
      }
      block.append(head);
      const roots = el("div", "trie-children" + (context.children.length > 1 ? " branching" : ""));
      context.children.forEach((child, index) => {
        const label = context.children.length > 1 ? `branch ${index + 1}/${context.children.length}` : null;
        roots.append(trieNode(child, tipsByStep, label));
      });
      block.append(roots);
      box.append(block);
    }
  }

  // -- tokens --------------------------------------------------------------------------------------------------------

  function heat(logprob) {
    const clamped = Math.max(HEAT_FLOOR, Math.min(0, logprob));
    const hue = 120 * (1 - clamped / HEAT_FLOOR);
    return `hsl(${hue}, 70%, 80%)`;
  }

  function versionOrder(values) {
    const distinct = [...new Set(values.filter((v) => v !== null && v !== undefined).map(String))];
    const numeric = distinct.every((v) => v !== "" && !Number.isNaN(Number(v)));
    distinct.sort(numeric ? (a, b) => Number(a) - Number(b) : undefined);
    return new Map(distinct.map((v, i) => [v, VERSION_PALETTE[i % VERSION_PALETTE.length]]));
  }

  // Whitespace made visible: · for a space, → for a tab, ↵ for a newline (then a real line break).
  function appendVisibleText(span, text) {
    let plain = "";
    const flush = () => { if (plain) { span.append(plain); plain = ""; } };
    for (const ch of text) {
      if (ch === " " || ch === "\t" || ch === "\n" || ch === "\r") {
        flush();
        span.append(el("span", "ws", ch === " " ? "·" : ch === "\t" ? "→" : ch === "\n" ? "↵" : "␍"));
      } else {
        plain += ch;
      }
    }
    flush();
  }

  function tokenSpan(tokens, index, colours) {
    const id = tokens.ids[index];
    const text = tokens.text[index];
    const mask = tokens.mask[index];
    const logprob = tokens.logprob[index];
    const version = tokens.version[index];
    const span = el("span", "tok");
    span.dataset.index = String(index);
    span.dataset.tokenId = String(id);
    span.dataset.mask = mask ? "1" : "0";
    span.dataset.logprob = logprob === null || logprob === undefined ? "" : String(logprob);
    span.dataset.version = version === null || version === undefined ? "" : String(version);
    span.dataset.text = text;
    if (mask) {
      span.style.backgroundColor = logprob === null || logprob === undefined ? NO_LOGPROB_BACKGROUND : heat(logprob);
    } else {
      span.classList.add("masked");
      span.style.backgroundColor = MASKED_BACKGROUND;
      if (tokens.generated[index]) span.classList.add("generated-untrained");
    }
    if (version !== null && version !== undefined) span.style.borderBottomColor = colours.get(String(version));
    if (/^<\|[^|]*\|>$|^<\/?think>$|^<\/?tool_call>$/.test(text)) span.classList.add("special");
    if (text) appendVisibleText(span, text); else span.append(`#${id}`);
    return span;
  }

  function drawSegment(segment, colours) {
    const box = el("div", "segment");
    box.dataset.trajectoryId = segment.trajectory_id;
    box.id = "segment-" + segment.trajectory_id;
    const head = el("div", "segment-head");
    head.append(el("span", "tid", segment.trajectory_id));
    if (segment.preview) head.append(el("span", "preview-badge", "preview (not finalized)"));
    if (segment.boundary_reason) {
      // Styled as the trie's boundary chips, but not a .boundary: those mark the trie's nodes only.
      const boundary = el("span", "segment-reason", segment.boundary_reason);
      boundary.dataset.reason = segment.boundary_reason;
      boundary.title = segment.boundary_detail || "why this segment began";
      head.append(boundary);
    }
    const meta = [
      `steps ${(segment.step_ids || []).join(", ")}`,
      `${fmt(segment.token_count)} tokens`,
      `${fmt(segment.trained_tokens)} trained`,
      `finish: ${segment.finish_reason ?? "—"}`,
    ];
    if (segment.forked_from_step !== null && segment.forked_from_step !== undefined) {
      meta.push(`forked from step ${segment.forked_from_step}`);
    }
    if (segment.build_mode) meta.push(segment.build_mode);
    if (segment.reward_info) meta.push("reward " + JSON.stringify(segment.reward_info));
    if (segment.logprobs_absent_reason) meta.push("no logprobs: " + segment.logprobs_absent_reason);
    head.append(el("span", "meta", meta.join(" · ")));
    box.append(head);

    const strip = el("div", "tokens");
    const tokens = segment.tokens;
    const starts = new Map();
    for (const step of segment.steps || []) {
      if (step.start !== null && step.start !== undefined) starts.set(step.start, step);
    }
    const fragment = document.createDocumentFragment();
    for (let index = 0; index < tokens.ids.length; index++) {
      const step = starts.get(index);
      if (step) {
        const marker = el("span", "step-boundary" + (step.trained ? "" : " untrained"), `step ${step.step_id}`);
        marker.dataset.stepId = String(step.step_id);
        marker.title = `step ${step.step_id}: ${step.context} context + ${step.output} generated tokens` +
          (step.trained ? "" : " (trained in another segment)") +
          (step.finish_reason ? ` · finish: ${step.finish_reason}` : "");
        fragment.append(marker);
      }
      fragment.append(tokenSpan(tokens, index, colours));
      if (tokens.text[index] && tokens.text[index].endsWith("\n")) fragment.append(document.createElement("br"));
    }
    strip.append(fragment);
    box.append(strip);
    return box;
  }

  function drawLegend(colours, anyPreview) {
    const legend = $("legend");
    legend.replaceChildren();
    const item = (swatch, label) => { const i = el("span", "legend-item"); i.append(swatch, label); legend.append(i); };
    const swatch = (colour) => { const s = el("span", "swatch"); s.style.background = colour; return s; };
    item(swatch(MASKED_BACKGROUND), "context / loss mask 0");
    const heatItem = el("span", "legend-item");
    heatItem.append("trained logprob ", el("span", "mono", "≤ −5"), el("span", "heat-bar"),
                    el("span", "mono", "0"));
    legend.append(heatItem);
    item(swatch(NO_LOGPROB_BACKGROUND), "trained, no logprob");
    const dashed = swatch(MASKED_BACKGROUND);
    dashed.style.outline = "1px dashed #9ca3af";
    item(dashed, "generated, trained in another segment");
    item(el("span", "legend-step", "step n"), "step boundary");  // not a .step-boundary: those precede tokens
    item(el("span", "ws mono", "· → ↵"), "space, tab, newline");
    for (const [version, colour] of colours) {
      const v = el("span", "version-swatch");
      v.style.borderBottomColor = colour;
      item(v, `weight version ${version}`);
    }
    if (!colours.size) legend.append(el("span", "legend-item", "no weight versions recorded"));
    if (anyPreview) legend.append(el("span", "legend-item preview-badge", "preview: what finalize would export now"));
  }

  function focusSegment(trajectoryId) {
    const target = document.getElementById("segment-" + trajectoryId);
    if (!target) return;
    for (const other of document.querySelectorAll(".segment.highlight")) other.classList.remove("highlight");
    target.classList.add("highlight");
    target.scrollIntoView({ behavior: "smooth", block: "start" });
  }

  // -- one session ---------------------------------------------------------------------------------------------------

  function drawStats(row) {
    const stats = $("session-stats");
    stats.replaceChildren();
    const stat = (label, value) => {
      const s = el("span", "stat");
      s.append(el("span", "", label), el("b", "", fmt(value)));
      stats.append(s);
    };
    const state = el("span", "stat");
    state.append(stateChip(row.state));
    stats.append(state);
    stat("steps", row.steps);
    stat(row.segments_preview ? "segments (preview)" : "segments", row.segments);
    stat("tokens", row.tokens);
    stat("in flight", row.in_flight);
    stat("branches", row.branches);
    if (row.finalize_reason) stat("finalized", row.finalize_reason);
    if (row.instance_id) stat("instance", row.instance_id);
  }

  async function showSession(sessionId) {
    const ticket = routeTicket;
    const data = await getJson("api/sessions/" + encodeURIComponent(sessionId));
    if (ticket !== routeTicket) return;
    $("list-view").hidden = true;
    $("session-view").hidden = false;
    setSource(data.source);
    $("session-title").textContent = data.session.session_id;
    document.title = "dressage-proxy · " + data.session.session_id;
    drawStats(data.session);
    const note = $("session-note");
    note.textContent = data.note || "";
    note.hidden = !data.note;
    const segments = data.segments || [];
    drawTrie(data.trie, segments);
    const colours = versionOrder(segments.flatMap((segment) => segment.tokens.version));
    drawLegend(colours, segments.some((segment) => segment.preview));
    const box = $("segments");
    box.replaceChildren(...segments.map((segment) => drawSegment(segment, colours)));
    if (!segments.length) box.append(el("p", "empty", "No segment to show."));
  }

  // -- the tooltip ---------------------------------------------------------------------------------------------------

  function showTooltip(span, event) {
    const tip = $("token-tooltip");
    const logprob = span.dataset.logprob;
    const rows = [
      ["token id", span.dataset.tokenId],
      ["text", span.dataset.text ? JSON.stringify(span.dataset.text) : "(no tokenizer)"],
      ["logprob", logprob === "" ? "—" : `${logprob}  (p = ${(Math.exp(Number(logprob)) * 100).toFixed(1)}%)`],
      ["version", span.dataset.version === "" ? "—" : span.dataset.version],
      ["loss mask", span.dataset.mask],
      ["position", span.dataset.index],
    ];
    // The span's text already shows whitespace as symbols (or "#id" without a tokenizer).
    const text = el("div", "tt-text", span.textContent);
    const table = el("table");
    for (const [key, value] of rows) {
      const tr = el("tr");
      tr.append(el("td", "", key), el("td", "mono", value));
      table.append(tr);
    }
    tip.replaceChildren(text, table);
    tip.hidden = false;
    moveTooltip(event);
  }

  function moveTooltip(event) {
    const tip = $("token-tooltip");
    const x = Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const below = event.clientY + 18;
    const y = below + tip.offsetHeight > window.innerHeight ? event.clientY - tip.offsetHeight - 10 : below;
    tip.style.left = `${Math.max(4, x)}px`;
    tip.style.top = `${Math.max(4, y)}px`;
  }

  document.addEventListener("mouseover", (event) => {
    const span = event.target.closest && event.target.closest("span.tok");
    if (span) showTooltip(span, event); else $("token-tooltip").hidden = true;
  });
  document.addEventListener("mousemove", (event) => {
    if (!$("token-tooltip").hidden) moveTooltip(event);
  });

  // -- routing -------------------------------------------------------------------------------------------------------

  async function route() {
    const ticket = ++routeTicket;
    try {
      const match = /^#\/session\/(.+)$/.exec(location.hash);
      if (match) await showSession(decodeURIComponent(match[1]));
      else await showList();
      if (ticket === routeTicket) showError("");
    } catch (error) {
      if (ticket === routeTicket) showError(String(error.message || error));
    }
  }

  window.addEventListener("hashchange", route);
  $("refresh").addEventListener("click", route);
  $("auto-refresh").addEventListener("change", (event) => {
    if (autoTimer) clearInterval(autoTimer);
    autoTimer = event.target.checked ? setInterval(route, AUTO_REFRESH_MS) : null;
  });
  route();
})();
