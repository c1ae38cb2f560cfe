// The lesson page: steps, the image with [MASK] painting and the query patch, the prediction, attention per block
// and head, how one attention row is computed, rollout, head switches and the position-embedding similarity.
// All text from the lesson reaches the page through textContent only. The state lives in the URL fragment
// (#step=6&mask=10,11,12&off=1:0&q=9&block=b0&head=mean) and is mirrored in document.body.dataset.state.
"use strict";

(() => {
  const DATA = JSON.parse(document.getElementById("lesson-data").textContent);
  const F = VitForward;
  const $ = (id) => document.getElementById(id);
  const VIEW_CARDS = { Prediction: "card-prediction", Attention: "card-attention", Heads: "card-heads",
                       "Position embeddings": "card-pe", Compare: "card-compare", Embeddings: "card-image",
                       Explain: "card-rollout" };
  const state = { step: 0, mask: new Set(), off: new Set(), query: null, block: "b0", head: "mean",
                  input: "mask" };
  let result = null, baseline = null;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  const step = () => DATA.steps[state.step];
  const model = () => DATA.models[step().model];
  const image = () => DATA.images[step().image];
  const pixels = (img) => (img._pixels = img._pixels || F.decode(img.blob));
  const gridOf = () => [image().height / model().config.patch_size, image().width / model().config.patch_size];
  const layers = (m) => m.config.depth + m.config.class_attn_depth;

  // ------------------------------------------------------------------ colours
  const INFERNO = [[0, 0, 4], [40, 11, 84], [101, 21, 110], [159, 42, 99], [212, 72, 66], [245, 125, 21],
                   [250, 193, 39], [252, 255, 164]];
  function ramp(stops, t) {
    const x = Math.min(Math.max(t, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2);
    const f = x - i;
    return stops[i].map((v, c) => Math.round(v + f * (stops[i + 1][c] - v)));
  }
  const OPACITY = 0.6;  // of a map over the image, as the app draws it
  const DIVERGING = [[33, 102, 172], [103, 169, 207], [247, 247, 247], [239, 138, 98], [178, 24, 43]];

  // ------------------------------------------------------------------ drawing
  function drawImage(canvas, img, m, overlay, opacity) {
    // the image de-normalised (as the model sees it), optionally a per-patch map over it (values 0..1)
    const h = img.height, w = img.width, px = pixels(img), mean = m.config.mean, std = m.config.std;
    const rgba = new ImageData(w, h);
    for (let c = 0; c < 3; c++) {
      for (let i = 0; i < h * w; i++) {
        rgba.data[i * 4 + c] = Math.round(Math.min(Math.max(px[c * h * w + i] * std[c] + mean[c], 0), 1) * 255);
      }
    }
    for (let i = 0; i < h * w; i++) rgba.data[i * 4 + 3] = 255;
    if (overlay) {
      const p = m.config.patch_size, gw = w / p;
      for (let y = 0; y < h; y++) {
        for (let x = 0; x < w; x++) {
          const colour = ramp(INFERNO, overlay[Math.floor(y / p) * gw + Math.floor(x / p)]), o = (y * w + x) * 4;
          for (let c = 0; c < 3; c++) rgba.data[o + c] = Math.round((1 - opacity) * rgba.data[o + c] + opacity * colour[c]);
        }
      }
    }
    const small = document.createElement("canvas");
    small.width = w;
    small.height = h;
    small.getContext("2d").putImageData(rgba, 0, 0);
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.drawImage(small, 0, 0, canvas.width, canvas.height);
    return ctx;
  }

  function drawGrid(ctx, canvas, grid) {
    const sy = canvas.height / grid[0], sx = canvas.width / grid[1];
    ctx.strokeStyle = "rgba(255,255,255,0.35)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let r = 1; r < grid[0]; r++) { ctx.moveTo(0, r * sy + 0.5); ctx.lineTo(canvas.width, r * sy + 0.5); }
    for (let c = 1; c < grid[1]; c++) { ctx.moveTo(c * sx + 0.5, 0); ctx.lineTo(c * sx + 0.5, canvas.height); }
    ctx.stroke();
    return [sy, sx];
  }

  function drawMasksAndQuery(ctx, canvas, grid) {
    const [sy, sx] = drawGrid(ctx, canvas, grid);
    ctx.save();
    for (const i of state.mask) {
      const r = Math.floor(i / grid[1]), c = i % grid[1];
      ctx.fillStyle = "rgba(40,40,40,0.55)";
      ctx.fillRect(c * sx, r * sy, sx, sy);
      ctx.strokeStyle = "rgba(255,255,255,0.8)";
      ctx.beginPath();
      for (let k = -sy; k < sx; k += 6) { ctx.moveTo(c * sx + k, r * sy + sy); ctx.lineTo(c * sx + k + sy, r * sy); }
      ctx.rect(c * sx, r * sy, sx, sy);
      ctx.clip();
      ctx.stroke();
      ctx.restore();
      ctx.save();
    }
    ctx.restore();
    if (state.query !== null) {
      const r = Math.floor(state.query / grid[1]), c = state.query % grid[1];
      ctx.strokeStyle = "#22d3ee";
      ctx.lineWidth = 3;
      ctx.strokeRect(c * sx + 1.5, r * sy + 1.5, sx - 3, sy - 3);
    }
  }

  function normalised(values) {
    let hi = 0;
    for (const v of values) hi = Math.max(hi, v);
    return Array.from(values, (v) => (hi > 0 ? v / hi : 0));
  }

  function bars(container, m, res, topK) {
    container.replaceChildren();
    const probs = F.softmax(res.logits);
    const order = Array.from(probs.keys()).sort((a, b) => probs[b] - probs[a] || a - b).slice(0, topK);
    const headProbs = Object.fromEntries(Object.entries(res.heads).map(([k, v]) => [k, F.softmax(v)]));
    order.forEach((index, rank) => {
      container.append(el("span", m.labels[index], "label"));
      const track = el("span", null, "track"), fill = el("span", null, rank === 0 ? "fill top" : "fill");
      fill.style.width = `${(probs[index] * 100).toFixed(2)}%`;
      fill.style.display = "block";
      track.append(fill);
      if (res.heads.dist) {
        for (const name of Object.keys(headProbs)) {
          const mark = el("span", null, name === "dist" ? "marker dist" : "marker");
          mark.style.left = `calc(${(headProbs[name][index] * 100).toFixed(2)}% - 1px)`;
          mark.title = `${name === "dist" ? "distillation" : "class"} head ${(headProbs[name][index] * 100).toFixed(1)}%`;
          track.append(mark);
        }
      }
      container.append(track, el("span", `${(probs[index] * 100).toFixed(1)}%`, "value"));
    });
    return order.map((index) => ({ index, label: m.labels[index], prob: probs[index] }));
  }

  // ------------------------------------------------------------------ the forward pass and the panels
  function run() {
    const m = model(), img = image();
    const options = { mask: Array.from(state.mask).sort((a, b) => a - b), off: Array.from(state.off, (k) => k.split(":").map(Number)) };
    result = F.forward(m, pixels(img), img.height, img.width, options);
    baseline = options.mask.length || options.off.length ? F.forward(m, pixels(img), img.height, img.width, {}) : null;
    render();
  }

  function blockChoices(m) {
    const out = [];
    for (let i = 0; i < m.config.depth; i++) out.push([`b${i}`, `block ${i}`]);
    for (let j = 0; j < m.config.class_attn_depth; j++) out.push([`c${j}`, `class attention ${j}`]);
    return out;
  }

  function fillSelect(select, choices, value) {
    select.replaceChildren(...choices.map(([v, text]) => { const o = el("option", text); o.value = v; return o; }));
    select.value = value;
  }

  function tokenName(m, index) {
    const prefix = m.config.prefix_names;
    if (index < prefix.length) return `[${prefix[index].toUpperCase()}]`;
    const gw = gridOf()[1], p = index - prefix.length;
    return `patch ${p} (${Math.floor(p / gw)}, ${p % gw})`;
  }

  function attentionRow() {
    // the attention row drawn: (probs over keys, key count, prefix count, query name), per head
    const m = model(), nh = m.config.num_heads, grid = gridOf(), n = grid[0] * grid[1];
    if (state.block[0] === "c") {
      const b = result.classBlocks[Number(state.block.slice(1))], t = n + 1;
      return { rows: Array.from({ length: nh }, (_, h) => b.probs.subarray(h * t, (h + 1) * t)), prefix: 1,
               query: "[CLS]", keys: t };
    }
    const b = result.blocks[Number(state.block.slice(1))], t = result.tokens, prefix = result.prefix.length;
    // no query picked: [CLS] (the first prefix token); a model with none in these blocks (CaiT) starts at patch 0
    const q = state.query === null ? 0 : prefix + state.query;
    return { rows: Array.from({ length: nh }, (_, h) => b.probs.subarray((h * t + q) * t, (h * t + q + 1) * t)),
             prefix, query: tokenName(m, q), keys: t, q };
  }

  function shownHeads() {
    // the heads the attention map shows: one, their mean (one map), or "all" (the step's heads, or every head)
    const nh = model().config.num_heads;
    if (state.head === "mean") return [Array.from({ length: nh }, (_, h) => h)];
    if (state.head === "all") return (step().heads || Array.from({ length: nh }, (_, h) => h)).map((h) => [h]);
    return [[Number(state.head)]];
  }

  function attentionMap(rows, prefix, heads) {
    // the mean over `heads` of the attention row to each patch, (N)
    const n = rows[0].length - prefix, out = new Float64Array(n);
    for (const h of heads) for (let j = 0; j < n; j++) out[j] += rows[h][prefix + j] / heads.length;
    return out;
  }

  function renderAttention() {
    const m = model(), row = attentionRow(), groups = shownHeads(), canvas = $("attention");
    const columns = Math.ceil(Math.sqrt(groups.length)), tiles = Math.ceil(groups.length / columns);
    const side = Math.floor(320 / columns);
    canvas.width = side * columns;
    canvas.height = side * tiles;
    const tile = document.createElement("canvas");
    tile.width = tile.height = side;
    const peaks = groups.map((heads, k) => {
      const map = attentionMap(row.rows, row.prefix, heads);
      drawMasksAndQuery(drawImage(tile, image(), m, normalised(map), OPACITY), tile, gridOf());
      canvas.getContext("2d").drawImage(tile, (k % columns) * side, Math.floor(k / columns) * side);
      return Math.max(...map);
    });
    const where = state.block[0] === "c" ? `class-attention block ${state.block.slice(1)}` : `block ${state.block.slice(1)}`;
    const which = state.head === "mean" ? "the mean of its heads" : state.head === "all"
      ? `heads ${groups.map((g) => g[0]).join(", ")} (left to right, top to bottom), each scaled to its own peak` : `head ${state.head}`;
    $("attention-note").textContent = `Where ${row.query} looks in ${where}: ${which} (brightest: ` +
      `${peaks.map((p) => (p * 100).toFixed(1) + "%").join(", ")} of its attention). ` +
      (state.block[0] === "c" ? "In a class-attention block only [CLS] asks."
        : "Click a patch here, or pick it on the image, to see its attention; [CLS] when none is picked.");
    renderHow(row, groups[0][0]);
  }

  function renderHow(row, h) {
    // one head's attention row: q·k/√d for every key, the softmax, and the weighted sum of the values
    const m = model(), d = m.config.embed_dim, nh = m.config.num_heads, hd = d / nh;
    const table = $("how");
    table.replaceChildren();
    let q, keyAt, valueAt, scores;
    if (state.block[0] === "c") {
      const b = result.classBlocks[Number(state.block.slice(1))];
      q = Array.from({ length: hd }, (_, j) => b.q[h * hd + j]);
      keyAt = (t, j) => b.k[t * d + h * hd + j];
      valueAt = (t, j) => b.v[t * d + h * hd + j];
      scores = Array.from({ length: row.keys }, (_, t) => q.reduce((s, v, j) => s + v * keyAt(t, j), 0) / Math.sqrt(hd));
    } else {
      const b = result.blocks[Number(state.block.slice(1))], t = result.tokens;
      q = Array.from({ length: hd }, (_, j) => b.qkv[row.q * 3 * d + h * hd + j]);
      keyAt = (k, j) => b.qkv[k * 3 * d + d + h * hd + j];
      valueAt = (k, j) => b.qkv[k * 3 * d + 2 * d + h * hd + j];
      scores = Array.from({ length: t }, (_, k) => b.scores[(h * t + row.q) * t + k]);
    }
    const probs = row.rows[h];
    const name = (t) => (state.block[0] === "c" ? (t === 0 ? "[CLS]" : tokenName(m, t - 1 + m.config.prefix_names.length)) : tokenName(m, t));
    $("how-intro").textContent = `Head ${h} of ${state.block[0] === "c" ? "class-attention block" : "block"} ${state.block.slice(1)}, query ${row.query}: ` +
      `its query vector q (${hd} numbers: ${q.slice(0, 3).map((v) => v.toFixed(3)).join(", ")}, …) meets every key k; ` +
      `the score is q·k/√${hd}, the softmax turns the ${probs.length} scores into weights that sum to 1. The keys with the largest weights:` +
      (m.config.talking_heads ? " (talking heads: the scores shown are after the heads are mixed, and the weights are mixed again after the softmax)" : "");
    const head = el("tr");
    for (const text of ["key", "q·k/√d", "softmax", "weight × v₀"]) head.append(el("th", text));
    table.append(head);
    const order = Array.from(probs.keys()).sort((a, b) => probs[b] - probs[a] || a - b).slice(0, 8);
    for (const t of order) {
      const tr = el("tr");
      tr.append(el("td", name(t)), el("td", scores[t].toFixed(3)), el("td", probs[t].toFixed(4)),
                el("td", (probs[t] * valueAt(t, 0)).toFixed(4)));
      table.append(tr);
    }
    const out = Array.from({ length: Math.min(hd, 4) }, (_, j) => probs.reduce((s, p, t) => s + p * valueAt(t, j), 0));
    $("how-out").textContent = `The head's output is the weighted sum of all ${probs.length} value vectors: ` +
      `(${out.map((v) => v.toFixed(4)).join(", ")}, …)` + (state.off.has(`${state.block[0] === "c" ? m.config.depth + Number(state.block.slice(1)) : state.block.slice(1)}:${h}`) ? "; this head is switched off, so the block adds none of it." : ".");
  }

  function renderRollout() {
    const m = model(), canvas = $("rollout");
    if (!m.config.prefix_names.length && !m.config.class_attn_depth) {
      drawImage(canvas, image(), m, null, 0);
      $("rollout-note").textContent = "This model has no [CLS] token: rollout from [CLS] does not apply.";
      return;
    }
    const map = F.rollout(result), ctx = drawImage(canvas, image(), m, normalised(map), OPACITY);
    drawGrid(ctx, canvas, gridOf());
    $("rollout-note").textContent = "How much each patch flows into [CLS] at the end: each block's attention " +
      "(mean of its heads) with the residual added, multiplied from the last block back to the first" +
      (m.config.class_attn_depth ? ", starting from the class-attention blocks." : ".");
  }

  function renderHeads() {
    const m = model(), box = $("heads");
    box.replaceChildren();
    box.style.gridTemplateColumns = `max-content repeat(${m.config.num_heads}, max-content)`;
    box.append(el("span", "block \\ head"));
    for (let h = 0; h < m.config.num_heads; h++) box.append(el("span", String(h), "head-number"));
    for (let l = 0; l < layers(m); l++) {
      box.append(el("span", l < m.config.depth ? `block ${l}` : `class block ${l - m.config.depth}`));
      for (let h = 0; h < m.config.num_heads; h++) {
        const key = `${l}:${h}`, button = el("button", state.off.has(key) ? "off" : "on", state.off.has(key) ? "off" : "");
        button.type = "button";
        button.setAttribute("aria-pressed", String(!state.off.has(key)));
        button.title = `block ${l}, head ${h}`;
        button.addEventListener("click", () => {
          if (state.off.has(key)) state.off.delete(key); else state.off.add(key);
          changed();
        });
        box.append(button);
      }
    }
    $("heads-note").textContent = `${state.off.size} of ${layers(m) * m.config.num_heads} heads off. A head switched off adds nothing to its block's output.`;
  }

  function renderPE() {
    const m = model(), grid = gridOf(), key = `${grid[0]}x${grid[1]}`, sim = m.pe_similarity[key];
    const canvas = $("pe"), ctx = canvas.getContext("2d");
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    const note = m.pe_notes[key] || "";
    if (!sim) {
      $("pe-note").textContent = note || "This model has no position embedding to compare.";
      return;
    }
    const [gh, gw] = grid, tile = Math.floor((canvas.width - (gw - 1) * 2) / gw), cell = tile / gw;
    for (let r = 0; r < gh; r++) for (let c = 0; c < gw; c++) for (let i = 0; i < gh; i++) for (let j = 0; j < gw; j++) {
      const v = sim[((r * gw + c) * gh + i) * gw + j], colour = ramp(DIVERGING, (v + 1) / 2);
      ctx.fillStyle = `rgb(${colour[0]},${colour[1]},${colour[2]})`;
      ctx.fillRect(c * (tile + 2) + j * cell, r * (tile + 2) + i * cell, Math.ceil(cell), Math.ceil(cell));
    }
    $("pe-note").textContent = "Tile (r, c): the cosine similarity of patch (r, c)'s position embedding with every " +
      "patch's (blue −1, white 0, red +1)." + (note ? " " + note[0].toUpperCase() + note.slice(1) + "." : "") +
      (m.built ? " This model is untrained: its position embeddings are random." : "");
  }

  function changeText(m, res) {
    if (!baseline) return "No masks: this is the model's prediction on the whole image.";
    const p = F.softmax(res.logits), b = F.softmax(baseline.logits);
    const top = p.indexOf(Math.max(...p)), topBase = b.indexOf(Math.max(...b));
    const delta = p[topBase] - b[topBase];
    let text = `With ${state.mask.size} masked patches, ${state.off.size} heads off: '${m.labels[topBase]}' ` +
      `${(b[topBase] * 100).toFixed(1)}% → ${(p[topBase] * 100).toFixed(1)}% (${Math.abs(delta) >= 0.0005 ? (delta > 0 ? "+" : "") + (delta * 100).toFixed(1) + "%" : "no change"}).`;
    if (top !== topBase) text += ` The top class changed to '${m.labels[top]}' (${(p[top] * 100).toFixed(1)}%).`;
    return text;
  }

  function render() {
    const m = model(), s = step(), grid = gridOf();
    const canvas = $("image"), ctx = drawImage(canvas, image(), m, null, 0);
    drawMasksAndQuery(ctx, canvas, grid);
    $("readout").textContent = `${m.name}: ${grid[0]}×${grid[1]} patches of ${m.config.patch_size}×${m.config.patch_size} pixels, ${result.tokens} tokens` +
      (m.config.prefix_names.length ? ` (${m.config.prefix_names.map((p) => `[${p.toUpperCase()}]`).join(", ")} first)` : "") +
      `; ${state.mask.size} patches masked.`;
    $("prediction-title").textContent = result.heads.dist ? "Prediction: the average of both heads (bars), each head (markers)" : "Prediction";
    const top = bars($("bars"), m, result, DATA.top_k);
    $("change").textContent = changeText(m, result);
    renderAttention();
    renderRollout();
    renderHeads();
    renderPE();
    const compare = $("card-compare");
    compare.hidden = s.compare === null;
    if (s.compare !== null) {
      const other = DATA.models[s.compare], img = DATA.images[s.compare_image];
      const res = F.forward(other, pixels(img), img.height, img.width, { mask: Array.from(state.mask) });
      $("compare-title").textContent = `Compared: ${other.name} (the same image and mask)`;
      bars($("compare-bars"), other, res, DATA.top_k);
    }
    document.body.dataset.state = JSON.stringify({
      step: state.step + 1, title: s.title, model: m.name, top_k: top, logits: Array.from(result.logits),
      head_logits: Object.fromEntries(Object.entries(result.heads).map(([k, v]) => [k, Array.from(v)])),
      mask: Array.from(state.mask).sort((a, b) => a - b), off: Array.from(state.off, (k) => k.split(":").map(Number)),
      query: state.query, block: state.block, head: state.head, input: state.input,
    });
  }

  // ------------------------------------------------------------------ state, steps and the URL fragment
  function showStep() {
    const s = step(), m = model();
    $("counter").textContent = `${state.step + 1} / ${DATA.steps.length}`;
    $("prev").disabled = state.step === 0;
    $("next").disabled = state.step === DATA.steps.length - 1;
    $("step-title").textContent = s.title;
    $("caption").textContent = s.caption;
    $("figure").textContent = s.figure ? `See: ${s.figure}` : "";
    for (const card of document.querySelectorAll(".card")) card.classList.remove("focus");
    const focus = s.view === "Attention" && s.mode === "rollout" ? "card-rollout" : VIEW_CARDS[s.view];
    if (focus) $(focus).classList.add("focus");
    for (const radio of document.querySelectorAll("input[name=input]")) radio.checked = radio.value === state.input;
    fillSelect($("block"), blockChoices(m), state.block);
    const heads = [["mean", "mean of heads"], ["all", s.heads ? `heads ${s.heads.join(", ")}` : "all heads"], ...Array.from({ length: m.config.num_heads }, (_, h) => [String(h), `head ${h}`])];
    fillSelect($("head"), heads, state.head);
  }

  function stepDefaults(index) {
    const s = DATA.steps[index], m = DATA.models[s.model];
    const cls = s.mode === "class attention (CaiT)" && m.config.class_attn_depth;
    const head = s.mode === "one head" ? String(s.head) : s.mode === "all heads" || (cls && s.heads) ? "all" : "mean";
    return { step: index, input: s.input === "query" ? "query" : "mask", mask: new Set(s.mask), off: new Set(s.off.map(([l, h]) => `${l}:${h}`)), query: s.query,
             block: `${cls ? "c" : "b"}${s.layer}`, head };
  }

  function parseFragment(text) {
    // the fragment's fields over the step's own settings; anything malformed or out of range is ignored
    const fields = new URLSearchParams(text.replace(/^#/, ""));
    const n = Number(fields.get("step"));
    const index = Number.isInteger(n) && n >= 1 && n <= DATA.steps.length ? n - 1 : 0;
    const next = stepDefaults(index), m = DATA.models[DATA.steps[index].model];
    const img = DATA.images[DATA.steps[index].image], patches = (img.height / m.config.patch_size) * (img.width / m.config.patch_size);
    const ints = (value) => value.split(",").filter((v) => v !== "").map(Number).filter((v) => Number.isInteger(v));
    if (fields.has("mask")) next.mask = new Set(ints(fields.get("mask")).filter((v) => v >= 0 && v < patches));
    if (fields.has("off")) {
      next.off = new Set(fields.get("off").split(",").filter((pair) => /^\d+:\d+$/.test(pair)).filter((pair) => {
        const [l, h] = pair.split(":").map(Number);
        return l < layers(m) && h < m.config.num_heads;
      }));
    }
    if (fields.has("q")) {
      const q = Number(fields.get("q"));
      next.query = fields.get("q") === "" ? null : Number.isInteger(q) && q >= 0 && q < patches ? q : next.query;
    }
    if (fields.has("block") && blockChoices(m).some(([v]) => v === fields.get("block"))) next.block = fields.get("block");
    const head = fields.get("head");
    if (head === "mean" || head === "all" || (head !== null && /^\d+$/.test(head) && Number(head) < m.config.num_heads)) next.head = head;
    return next;
  }

  function fragment() {
    const mask = Array.from(state.mask).sort((a, b) => a - b).join(",");
    const off = Array.from(state.off).sort().join(",");
    return `#step=${state.step + 1}&mask=${mask}&off=${off}&q=${state.query === null ? "" : state.query}` +
      `&block=${state.block}&head=${state.head}`;
  }

  function apply(next) {
    Object.assign(state, next);
    showStep();
    run();
  }

  function changed() {
    // a student's change: written to the fragment (without reapplying it), then the forward pass
    history.replaceState(null, "", fragment());
    run();
  }

  function goTo(index) {
    if (index < 0 || index >= DATA.steps.length) return;
    apply(stepDefaults(index));
    history.replaceState(null, "", fragment());
  }

  function patchAt(event) {
    const canvas = $("image"), rect = canvas.getBoundingClientRect(), grid = gridOf();
    const r = Math.floor(((event.clientY - rect.top) / rect.height) * grid[0]);
    const c = Math.floor(((event.clientX - rect.left) / rect.width) * grid[1]);
    return r >= 0 && r < grid[0] && c >= 0 && c < grid[1] ? r * grid[1] + c : null;
  }

  let painting = null;  // while dragging in mask mode: whether patches become masked
  $("image").addEventListener("pointerdown", (event) => {
    const i = patchAt(event);
    if (i === null) return;
    if (state.input === "query") {
      state.query = state.query === i ? null : i;
      changed();
      return;
    }
    painting = !state.mask.has(i);
    $("image").setPointerCapture(event.pointerId);
    if (painting) state.mask.add(i); else state.mask.delete(i);
    changed();
  });
  $("image").addEventListener("pointermove", (event) => {
    const i = patchAt(event);
    if (painting === null || i === null || state.mask.has(i) === painting) return;
    if (painting) state.mask.add(i); else state.mask.delete(i);
    changed();
  });
  window.addEventListener("pointerup", () => { painting = null; });
  $("attention").addEventListener("pointerdown", (event) => {
    // a click on the attention map picks that patch as the query
    // (the first tile, when several heads are shown side by side: each tile's patch, wherever clicked)
    const canvas = $("attention"), rect = canvas.getBoundingClientRect(), grid = gridOf();
    const columns = Math.ceil(Math.sqrt(shownHeads().length));
    const tiles = Math.ceil(shownHeads().length / columns);
    const fx = (((event.clientX - rect.left) / rect.width) * columns) % 1, fy = (((event.clientY - rect.top) / rect.height) * tiles) % 1;
    const r = Math.floor(fy * grid[0]), c = Math.floor(fx * grid[1]);
    if (r < 0 || r >= grid[0] || c < 0 || c >= grid[1] || state.block[0] === "c") return;
    state.query = r * grid[1] + c;
    changed();
  });
  for (const radio of document.querySelectorAll("input[name=input]")) {
    radio.addEventListener("change", () => { state.input = radio.value; render(); });
  }
  $("clear").addEventListener("click", () => { state.mask.clear(); changed(); });
  $("block").addEventListener("change", () => { state.block = $("block").value; changed(); });
  $("head").addEventListener("change", () => { state.head = $("head").value; changed(); });
  $("prev").addEventListener("click", () => goTo(state.step - 1));
  $("next").addEventListener("click", () => goTo(state.step + 1));
  document.addEventListener("keydown", (event) => {
    const typing = ["SELECT", "INPUT", "TEXTAREA"].includes(document.activeElement && document.activeElement.tagName);
    if (event.key === "PageDown" || (!typing && event.key === "ArrowRight")) { goTo(state.step + 1); event.preventDefault(); }
    if (event.key === "PageUp" || (!typing && event.key === "ArrowLeft")) { goTo(state.step - 1); event.preventDefault(); }
    if (event.key === "Escape") { state.mask.clear(); changed(); }
  });
  window.addEventListener("hashchange", () => apply(parseFragment(location.hash)));

  $("title").textContent = DATA.title;
  document.title = DATA.title;
  const built = DATA.models.filter((m) => m.built).map((m) => m.name);
  $("footer").textContent = `Models: ${DATA.models.map((m) => `${m.name} (${m.parameters.toLocaleString("en")} parameters)`).join(", ")}. ` +
    "Everything runs in this page, offline; the numbers are the model's own (float32)." +
    (built.length ? ` Built untrained for this page from presets with seed ${DATA.seed}: ${built.join(", ")}.` : "") +
    " Exported by vit-explorer export-lesson.";
  apply(parseFragment(location.hash));
})();
