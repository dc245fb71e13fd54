/* DyMT-ESB report page: chart legends, the dialogue browser (filters, branch trees, side by side) and review marks.
   Model text is only ever set with textContent, never parsed as markup. Nothing is fetched: every byte is in the page. */
(function () {
  "use strict";
  var doc = document;
  function $(id) { return doc.getElementById(id); }
  function el(tag, cls, text) {
    var n = doc.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function each(list, fn) { Array.prototype.forEach.call(list, fn); }
  function readJSON(id) { return JSON.parse($(id).textContent); }

  // Time to summary: the summary is static HTML above this script; it is on screen by the frame after it runs.
  requestAnimationFrame(function () {
    setTimeout(function () {
      performance.mark("dymt-summary-shown");
      doc.documentElement.setAttribute("data-summary-ms", performance.now().toFixed(0));
    }, 0);
  });

  // ------------------------------------------------------------------ chart legends: press to hide or show a series
  each(doc.querySelectorAll(".chart-figure .key[aria-pressed]"), function (button) {
    button.addEventListener("click", function () {
      var on = button.getAttribute("aria-pressed") !== "true";
      button.setAttribute("aria-pressed", on ? "true" : "false");
      var kind = button.dataset.kind === "corrected";
      var selector = kind ? ".series.corrected" : '.series[data-series="' + button.dataset.series + '"]';
      each(button.closest(".chart-figure").querySelectorAll(selector), function (g) {
        g.classList.toggle(kind ? "off-kind" : "off", !on);
      });
    });
  });

  // ------------------------------------------------------------------ data
  var meta = readJSON("dymt-meta");
  var index = readJSON("dymt-index");
  var roots = index.roots, nodes = index.rows.map(function (row) {
    var node = {};
    index.cols.forEach(function (c, j) { node[c] = index.dict[c] ? index.dict[c][row[j]] : row[j]; });
    return node;
  });
  var byId = {};
  nodes.forEach(function (n, i) { byId[n.id] = i; });
  var blob = null, chunkCache = {};
  // The page is windows-1252: each character of the bodies block is one byte of gzip data, except these
  // 27 characters that windows-1252 puts at bytes 0x80-0x9F, and "=" + digit for the four escaped bytes.
  var CP1252 = { 0x20AC: 0x80, 0x201A: 0x82, 0x0192: 0x83, 0x201E: 0x84, 0x2026: 0x85, 0x2020: 0x86, 0x2021: 0x87,
    0x02C6: 0x88, 0x2030: 0x89, 0x0160: 0x8A, 0x2039: 0x8B, 0x0152: 0x8C, 0x017D: 0x8E, 0x2018: 0x91, 0x2019: 0x92,
    0x201C: 0x93, 0x201D: 0x94, 0x2022: 0x95, 0x2013: 0x96, 0x2014: 0x97, 0x02DC: 0x98, 0x2122: 0x99, 0x0161: 0x9A,
    0x203A: 0x9B, 0x0153: 0x9C, 0x017E: 0x9E, 0x0178: 0x9F };
  var ESCAPED = [0x00, 0x0D, 0x3C, 0x3D];
  function bytesOf(text) {
    var out = new Uint8Array(text.length), n = 0;
    for (var i = 0; i < text.length; i++) {
      var c = text.charCodeAt(i);
      if (c > 0xFF) c = CP1252[c];
      else if (c === 0x3D) c = ESCAPED[text.charCodeAt(++i) - 0x30];
      out[n++] = c;
    }
    return out.subarray(0, n);
  }
  function gunzip(span) {
    if (blob === null) blob = $("dymt-bodies").textContent;
    var stream = new Blob([bytesOf(blob.slice(span[0], span[1]))]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).arrayBuffer().then(function (buf) { return new Uint8Array(buf); });
  }
  // Bodies are word codes into one list (most frequent first): below 192 one byte, then two (192-223 + low
  // byte), then three (224-255 + two bytes); evals/report/html/wordcode.py writes them.
  var wordList = null;
  function detokenise(b, words) {
    var out = [], n = b.length, i = 0, c;
    while (i < n) {
      c = b[i++];
      if (c < 192) out.push(words[c]);
      else if (c < 224) out.push(words[192 + ((c - 192) << 8 | b[i++])]);
      else { out.push(words[8384 + ((c - 224) << 16 | b[i] << 8 | b[i + 1])]); i += 2; }
    }
    return out.join("");
  }
  function chunk(i) {
    if (!chunkCache[i]) {
      if (wordList === null) wordList = gunzip(index.words).then(function (b) { return JSON.parse(new TextDecoder().decode(b)); });
      chunkCache[i] = Promise.all([wordList, gunzip(index.chunks[i])]).then(function (r) { return JSON.parse(detokenise(r[1], r[0])); });
    }
    return chunkCache[i];
  }

  var LABEL = { b: ["✗", "biased", "biased"], n: ["✓", "not biased", "not_biased"], u: ["?", "unparsed", "unparsed"],
                "-": ["·", "no label", ""] };
  var CODE = { biased: "b", not_biased: "n", unparsed: "u" };
  function code(label) { return CODE[label] || "-"; }

  function strip(labels, fork) {
    var span = el("span", "strip");
    span.setAttribute("aria-label", "labels by turn");
    for (var i = 0; i < labels.length; i++) {
      var c = labels.charAt(i), mark = el("span", "m-" + (c === "-" ? "x" : c) + (fork && i + 1 < fork ? " shared" : ""), LABEL[c][0]);
      mark.title = "turn " + (i + 1) + ": " + LABEL[c][1];
      span.appendChild(mark);
    }
    return span;
  }
  function tag(text, cls) { return el("span", "tag" + (cls ? " " + cls : ""), text); }

  // ------------------------------------------------------------------ review marks (kept in localStorage)
  var marks = {}, storage = null;
  try { storage = window.localStorage; marks = JSON.parse(storage.getItem(meta.store_key) || "{}") || {}; } catch (err) { storage = null; }
  function saveMarks() {
    if (storage) { try { storage.setItem(meta.store_key, JSON.stringify(marks)); } catch (err) { /* full: kept in memory */ } }
    var n = Object.keys(marks).length;
    $("review-count").textContent = n + (n === 1 ? " reply marked" : " replies marked") + (storage ? "" : " (not saved: storage blocked)");
  }
  function humanLabel(mark) {
    var judge = mark.judge;
    if (mark.v === "agree") return judge === "biased" ? "biased" : judge === "not_biased" ? "not biased" : "";
    if (mark.v === "disagree") return judge === "biased" ? "not biased" : judge === "not_biased" ? "biased" : "";
    return mark.v === "biased" ? "biased" : mark.v === "not_biased" ? "not biased" : "";
  }
  function csvCell(value) {
    var s = value === undefined || value === null ? "" : String(value);
    return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  }
  function reviewCsv() {
    var lines = ["item_id,category,label,notes,judge_label,review"];
    Object.keys(marks).sort().forEach(function (id) {
      var m = marks[id];
      lines.push([id, m.cat, humanLabel(m), m.note, (LABEL[code(m.judge)] || LABEL["-"])[1], m.v].map(csvCell).join(","));
    });
    return lines.join("\r\n") + "\r\n";
  }
  $("review-download").addEventListener("click", function () {
    var name = ($("reviewer").value || "reviewer").replace(/[^A-Za-z0-9_.-]+/g, "_");
    var link = el("a");
    link.href = URL.createObjectURL(new Blob(["\ufeff" + reviewCsv()], { type: "text/csv;charset=utf-8" }));
    link.download = "review-" + name + ".csv";
    doc.body.appendChild(link);
    link.click();
    setTimeout(function () { URL.revokeObjectURL(link.href); link.remove(); }, 1000);
  });
  $("review-clear").addEventListener("click", function () {
    if (!Object.keys(marks).length || !window.confirm("Remove all your marks on this page?")) return;
    marks = {};
    saveMarks();
    each(doc.querySelectorAll(".review select"), function (s) { s.value = ""; });
    each(doc.querySelectorAll(".review input"), function (s) { s.value = ""; });
  });

  function reviewControls(node, turn) {
    var id = node.id + "#" + turn[0], judge = turn[4], parsed = judge === "biased" || judge === "not_biased";
    var box = el("div", "review");
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "your review of turn " + turn[0]);
    var select = el("select"), note = el("input");
    select.setAttribute("aria-label", "your verdict on turn " + turn[0]);
    [["", "review…"], ["agree", "agree with the judge"], ["disagree", "disagree with the judge"],
     ["biased", "my label: biased"], ["not_biased", "my label: not biased"]].forEach(function (o) {
      var opt = el("option", null, o[1]);
      opt.value = o[0];
      if (!parsed && (o[0] === "agree" || o[0] === "disagree")) opt.disabled = true;
      select.appendChild(opt);
    });
    note.type = "text";
    note.placeholder = "note";
    note.setAttribute("aria-label", "note on turn " + turn[0]);
    var mark = marks[id];
    if (mark) { select.value = mark.v; note.value = mark.note || ""; }
    function store() {
      if (!select.value && !note.value) delete marks[id];
      else marks[id] = { v: select.value, note: note.value, judge: judge, cat: node.cat, run: node.run };
      box.classList.toggle("marked", !!marks[id]);
      saveMarks();
    }
    select.addEventListener("change", store);
    note.addEventListener("change", store);
    box.classList.toggle("marked", !!mark);
    box.appendChild(select);
    box.appendChild(note);
    box.dataset.item = id;
    return box;
  }

  // ------------------------------------------------------------------ one turn, one dialogue, a branch beside its parent
  function message(cls, who, text) {
    var div = el("div", "msg " + cls);
    div.appendChild(el("span", "who", who));
    div.appendChild(doc.createTextNode(text === null || text === undefined ? "–" : text));
    return div;
  }
  function reasoningBlock(text, about) {
    // The target's reasoning, folded: neither the user simulator nor the judge saw it.
    var box = el("details", "msg reasoning"), c = about[1] ? code(about[1]) : null;
    var sum = el("summary", null, "reasoning · " + String(text).split(/\s+/).length + " words" +
      (about[0] ? " · " + about[0] : "") + " · seen by neither the user nor the judge");
    if (c) {
      sum.appendChild(doc.createTextNode(" · "));
      sum.appendChild(el("span", "badge m-" + (c === "-" ? "x" : c), "judged " + LABEL[c][0] + " " + LABEL[c][1]));
    }
    box.appendChild(sum);
    box.appendChild(el("div", "reasoning-text", text));
    return box;
  }
  function judgeLine(turn, judge) {
    var c = code(turn[4]), line = el("div", "judge");
    line.appendChild(el("span", "badge m-" + (c === "-" ? "x" : c), LABEL[c][0] + " " + LABEL[c][1]));
    var extra = [];
    if (turn[6] !== null && turn[6] !== undefined) extra.push("P(biased) " + Number(turn[6]).toFixed(2));
    if (turn[7] || judge) extra.push(turn[7] || judge);
    if (extra.length) line.appendChild(doc.createTextNode(" · " + extra.join(" · ")));
    return line;
  }
  function turnSection(node, turn, opts, judge) {
    var sec = el("section", "turn");
    sec.id = node.id + "-t" + turn[0];
    var head = el("h4", null, "Turn " + turn[0] + (turn[3] ? " · " + turn[3] : ""));
    if (turn[9]) head.appendChild(el("span", "inherited", " shared with " + turn[9]));
    sec.appendChild(head);
    sec.appendChild(message("user", "user", turn[1]));
    sec.appendChild(message("assistant", "target", turn[2]));
    if (turn[11]) sec.appendChild(reasoningBlock(turn[11], turn[12] || []));
    sec.appendChild(judgeLine(turn, judge));
    if (turn[5]) sec.appendChild(message("rationale", "rationale", turn[5]));
    if (turn[8]) sec.appendChild(message("raw", "raw judge output", turn[8]));
    if (turn[10]) sec.appendChild(el("div", "judge leak", "seed leakage" + (turn[10][0] ? " ⚠ leaked" : "") + ": " + turn[10][1]));
    if (!opts.compact && turn[2] != null && !turn[9]) sec.appendChild(reviewControls(node, turn));
    return sec;
  }
  function showNode(view, i, bodies) {
    var node = nodes[i], body = bodies[node.id];
    view.textContent = "";
    var title = el("h4", "view-title", node.par < 0 ? "Dialogue " + node.id : "Branch " + node.id);
    view.appendChild(title);
    if (node.par >= 0) {
      view.appendChild(el("p", "inherited", "Forks " + nodes[node.par].id + " at turn " + node.fork + ": " + (node.chg || "no change recorded") +
        ". Turns 1–" + (node.fork - 1) + " are its parent's."));
    }
    if (body.error) view.appendChild(el("p", "error", "error: " + body.error));
    body.turns.forEach(function (t) { view.appendChild(turnSection(node, t, {}, body.judge)); });
    view.focus();
  }
  function showPair(view, i, bodies) {
    var node = nodes[i], parent = nodes[node.par], a = bodies[parent.id], b = bodies[node.id];
    view.textContent = "";
    view.appendChild(el("h4", "view-title", "Side by side from turn " + node.fork));
    view.appendChild(el("p", "inherited", (node.fork > 1 ? "Turns 1–" + (node.fork - 1) + " are shared. " : "") +
      "Change: " + (node.chg || "no change recorded") + "."));
    var grid = el("div", "pair"), turnsA = {}, turnsB = {}, last = node.fork;
    a.turns.forEach(function (t) { turnsA[t[0]] = t; last = Math.max(last, t[0]); });
    b.turns.forEach(function (t) { turnsB[t[0]] = t; last = Math.max(last, t[0]); });
    [[parent, "A · parent ", 0], [node, "B · branch ", node.fork]].forEach(function (side) {
      var h = el("div", "pair-head", side[1] + side[0].id + " ");
      h.appendChild(strip(side[0].lab, side[2]));
      grid.appendChild(h);
    });
    for (var t = node.fork; t <= last; t++) {
      [[parent, turnsA[t], a], [node, turnsB[t], b]].forEach(function (side) {
        grid.appendChild(side[1] ? turnSection(side[0], side[1], { compact: true }, side[2].judge) : el("div", "turn empty", "turn " + t + ": –"));
      });
    }
    view.appendChild(grid);
    view.focus();
  }
  function treeItem(i, panel) {
    var node = nodes[i], li = el("li"), line = el("div", "tree-node");
    line.appendChild(strip(node.lab, node.par >= 0 ? node.fork : 0));
    line.appendChild(el("span", "tid", node.id));
    if (node.par >= 0) line.appendChild(el("span", "fork", "↳ turn " + node.fork + ": " + (node.chg || "no change recorded")));
    line.appendChild(tag(node.st));
    var actions = el("span", "actions"), show = el("button", "small", node.par < 0 ? "show dialogue" : "show branch");
    show.type = "button";
    show.addEventListener("click", function () { panel.select(i, false); });
    actions.appendChild(show);
    if (node.par >= 0) {
      var pair = el("button", "small", "beside its parent");
      pair.type = "button";
      pair.addEventListener("click", function () { panel.select(i, true); });
      actions.appendChild(pair);
    }
    line.appendChild(actions);
    li.appendChild(line);
    if (node.kids.length) {
      var ul = el("ul");
      node.kids.forEach(function (k) { ul.appendChild(treeItem(k, panel)); });
      li.appendChild(ul);
    }
    return li;
  }
  function openDialogue(row, rootIndex, then) {
    var root = nodes[rootIndex], box = row.querySelector(".dialogue");
    if (box.dataset.ready) { if (then) then(box.panel); return; }
    box.dataset.ready = "1";
    box.appendChild(el("p", "loading", "decoding…"));
    chunk(root.chunk).then(function (bodies) {
      box.textContent = "";
      var seed = el("details"), sum = el("summary", null, "seed statement (hidden from the target; click to show)");
      seed.appendChild(sum);
      seed.appendChild(el("div", "msg", bodies[root.id].statement));
      box.appendChild(seed);
      var view = el("div", "view");
      view.tabIndex = -1;
      var panel = { select: function (i, pair) { (pair ? showPair : showNode)(view, i, bodies); } };
      box.panel = panel;
      if (root.kids.length) {
        var tree = el("div", "tree");
        tree.appendChild(el("h4", null, "Branch tree"));
        var ul = el("ul");
        ul.appendChild(treeItem(rootIndex, panel));
        tree.appendChild(ul);
        box.appendChild(tree);
      }
      box.appendChild(view);
      showNode(view, rootIndex, bodies);
      if (then) then(panel);
    }).catch(function (err) { box.textContent = "could not decode this dialogue: " + err; });
  }

  // ------------------------------------------------------------------ the list and its filters
  var KEYS = ["category", "mode", "target", "label", "leakage", "review"], PAGE = 100, limit = PAGE, rows = {};
  function reviewed(i) {
    var n = nodes[i];
    for (var k in marks) { if (k.lastIndexOf(n.id + "#", 0) === 0) return true; }
    return n.kids.some(reviewed);
  }
  function matches(i, v) {
    var n = nodes[i];
    if (v.category && n.cat !== v.category) return false;
    if (v.mode && n.mode !== v.mode) return false;
    if (v.target && n.tgt !== v.target) return false;
    if (v.label === "biased" && n.lab.indexOf("b") < 0) return false;
    if (v.label === "no_bias" && (n.lab.indexOf("b") >= 0 || !/[nu]/.test(n.lab))) return false;
    if (v.label === "unparsed" && n.lab.indexOf("u") < 0) return false;
    if (v.leakage && n.leak !== v.leakage) return false;
    if (v.review && reviewed(i) !== (v.review === "marked")) return false;
    return true;
  }
  function row(i) {
    if (rows[i]) return rows[i];
    var n = nodes[i], li = el("li", "row"), open = el("button", "open"), box = el("div", "dialogue");
    li.dataset.thread = n.id;
    box.id = "dlg-" + i;
    box.hidden = true;
    open.type = "button";
    open.setAttribute("aria-expanded", "false");
    open.setAttribute("aria-controls", box.id);
    open.appendChild(strip(n.lab, 0));
    open.appendChild(el("span", "tid", n.id));
    [n.cat, n.mode, n.tgt, n.st].forEach(function (t) { open.appendChild(tag(t)); });
    if (n.leak === "leaked") open.appendChild(tag("seed leaked", "leak"));
    if (n.kids.length) open.appendChild(tag(n.kids.length + (n.kids.length > 1 ? " branches" : " branch"), "branch"));
    open.addEventListener("click", function () { toggle(i); });
    li.appendChild(open);
    li.appendChild(box);
    rows[i] = li;
    return li;
  }
  function toggle(i, then) {
    var li = row(i), box = li.querySelector(".dialogue"), open = li.querySelector(".open");
    var show = then ? true : box.hidden;
    box.hidden = !show;
    open.setAttribute("aria-expanded", show ? "true" : "false");
    if (show) openDialogue(li, i, then);
  }
  function values() {
    var v = {};
    KEYS.forEach(function (k) { v[k] = $("f-" + k).value; });
    return v;
  }
  function apply(writeHash) {
    var v = values(), shown = roots.filter(function (i) { return matches(i, v); }), list = $("list");
    list.textContent = "";
    shown.slice(0, limit).forEach(function (i) { list.appendChild(row(i)); });
    $("more").hidden = shown.length <= limit;
    $("shown").textContent = shown.length + " of " + roots.length + " dialogues shown" +
      (shown.length > limit ? " (first " + limit + " listed)" : "");
    if (writeHash && window.history && history.replaceState) {
      var parts = KEYS.filter(function (k) { return v[k]; }).map(function (k) { return k + "=" + encodeURIComponent(v[k]); });
      history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname);
    }
  }
  var wanted = {};
  location.hash.replace(/^#/, "").split("&").forEach(function (pair) {
    var kv = pair.split("=");
    if (kv.length !== 2) return;
    var value = decodeURIComponent(kv[1]), select = $("f-" + kv[0]);
    wanted[kv[0]] = value;
    if (select && Array.prototype.some.call(select.options, function (o) { return o.value === value; })) select.value = value;
  });
  KEYS.forEach(function (k) { $("f-" + k).addEventListener("change", function () { limit = PAGE; apply(true); }); });
  $("reset").addEventListener("click", function () { KEYS.forEach(function (k) { $("f-" + k).value = ""; }); limit = PAGE; apply(true); });
  $("more").addEventListener("click", function () { limit += PAGE; apply(false); });
  saveMarks();
  apply(false);

  // #open=THREAD opens a dialogue (a branch opens inside its tree); &pair=1 shows it beside its parent.
  if (wanted.open !== undefined && byId[wanted.open] !== undefined) {
    var target = byId[wanted.open], top = target;
    while (nodes[top].par >= 0) top = nodes[top].par;
    var li = row(top);
    if (!li.parentNode) $("list").insertBefore(li, $("list").firstChild);
    toggle(top, function (panel) {
      if (target !== top || wanted.pair) panel.select(target, !!wanted.pair && target !== top);
      doc.documentElement.setAttribute("data-opened", wanted.open);
      li.scrollIntoView();
    });
  }

  // ------------------------------------------------------------------ the labelling queue: the next batch, in order, blind
  // Each chosen reply is shown with its dialogue's earlier turns but without the judge's label or rationale;
  // labels are kept in localStorage per batch and downloaded as a CSV that evals.annotate validate reads.
  var queue = meta.queue || [], qkey = meta.store_key + ":queue:" + queue.map(function (q) { return q.item; }).join(",");
  var qlabels = {}, qshown = 0;
  try { qlabels = JSON.parse((storage && storage.getItem(qkey)) || "{}") || {}; } catch (err) { qlabels = {}; }
  function queueCount() {
    var n = queue.filter(function (q) { return qlabels[q.item]; }).length;
    if ($("queue-count")) $("queue-count").textContent = n + " of " + queue.length + " labelled";
    return n;
  }
  function saveQueue() {
    if (storage) { try { storage.setItem(qkey, JSON.stringify(qlabels)); } catch (err) { /* full: kept in memory */ } }
    queueCount();
  }
  function turnsUpTo(i, bodies) {  // a branch's earlier turns are its parent's
    var chain = [], byTurn = {};
    for (var k = i; k >= 0; k = nodes[k].par) chain.unshift(k);
    chain.forEach(function (k) { (bodies[nodes[k].id].turns || []).forEach(function (t) { byTurn[t[0]] = t; }); });
    return byTurn;
  }
  function showPick(k) {
    var box = $("queue"), pick = queue[k], cut = pick.item.lastIndexOf("#");
    var thread = pick.item.slice(0, cut), turn = Number(pick.item.slice(cut + 1)), i = byId[thread];
    var mine = ++qshown;  // a later call wins: its reply is the one shown
    box.hidden = false;
    box.textContent = "";
    box.appendChild(el("h3", null, "Reply " + (k + 1) + " of " + queue.length));
    if (i === undefined) { box.appendChild(el("p", "error", "dialogue " + thread + " is not on this page")); return Promise.resolve(); }
    var top = i;
    while (nodes[top].par >= 0) top = nodes[top].par;
    return chunk(nodes[top].chunk).then(function (bodies) {
      if (mine !== qshown) return;
      var byTurn = turnsUpTo(i, bodies), card = el("div", "pick");
      card.dataset.item = pick.item;
      card.appendChild(message("statement", "stereotype", bodies[nodes[top].id].statement));
      for (var t = 1; t <= turn; t++) {
        if (!byTurn[t]) continue;
        card.appendChild(message("user", "user · turn " + t, byTurn[t][1]));
        card.appendChild(message("assistant" + (t === turn ? " chosen" : ""), t === turn ? "reply to label" : "target", byTurn[t][2]));
      }
      box.appendChild(card);
      var actions = el("div", "review-actions");
      [["biased", "biased"], ["not_biased", "not biased"]].forEach(function (o) {
        var b = el("button", "label-" + o[0], o[1]);
        b.type = "button";
        b.setAttribute("aria-pressed", qlabels[pick.item] === o[0] ? "true" : "false");
        b.addEventListener("click", function () {
          qlabels[pick.item] = o[0];
          saveQueue();
          if (k + 1 < queue.length) showPick(k + 1); else showPick(k);
        });
        actions.appendChild(b);
      });
      [["previous", k - 1], ["next", k + 1]].forEach(function (o) {
        var b = el("button", "small", o[0]);
        b.type = "button";
        b.disabled = o[1] < 0 || o[1] >= queue.length;
        b.addEventListener("click", function () { showPick(o[1]); });
        actions.appendChild(b);
      });
      box.appendChild(actions);
      box.focus();
    });
  }
  function queueCsv() {
    var lines = ["item_id,category,label,notes,draw"];
    queue.forEach(function (q) {
      var n = byId[q.item.slice(0, q.item.lastIndexOf("#"))], label = qlabels[q.item];
      lines.push([q.item, n === undefined ? "" : nodes[n].cat, label === "biased" ? "biased" : label === "not_biased" ? "not biased" : "",
                  "", q.draw].map(csvCell).join(","));
    });
    return lines.join("\r\n") + "\r\n";
  }
  if ($("queue-start")) {
    $("queue-start").addEventListener("click", function () {
      var first = 0;
      while (first < queue.length - 1 && qlabels[queue[first].item]) first++;
      showPick(first);
    });
    $("queue-download").addEventListener("click", function () {
      var name = ($("labeller").value || "labeller").replace(/[^A-Za-z0-9_.-]+/g, "_"), link = el("a");
      link.href = URL.createObjectURL(new Blob(["\ufeff" + queueCsv()], { type: "text/csv;charset=utf-8" }));
      link.download = "labels-" + name + ".csv";
      doc.body.appendChild(link);
      link.click();
      setTimeout(function () { URL.revokeObjectURL(link.href); link.remove(); }, 1000);
    });
    queueCount();
  }
  window.dymtReview = { csv: reviewCsv, queueCsv: queueCsv, showPick: showPick, open: function (id, pair, done) {
    var i = byId[id], top = i;
    while (nodes[top].par >= 0) top = nodes[top].par;
    var li = row(top);
    if (!li.parentNode) $("list").insertBefore(li, $("list").firstChild);
    toggle(top, function (panel) { if (i !== top || pair) panel.select(i, !!pair && i !== top); if (done) done(); });
  } };
})();
