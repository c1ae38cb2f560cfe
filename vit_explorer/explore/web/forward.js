// The glass-box ViT's forward pass in plain JavaScript (models/vit.py and models/blocks.py, line for line): the
// stems (patchify; convolutional with batch norm), [MASK] on chosen patches, prefix tokens ([CLS], distillation,
// registers), the additive position embedding (the table the export computed for each grid), pre-norm blocks
// with an optional head mask, talking heads and LayerScale, CaiT's class-attention blocks, the final norm, pooling
// and one or two heads. Tensors are Float32Array in row-major order; sums run in float64 and every stored value is
// rounded to float32, as PyTorch's float32 keeps them.
"use strict";

const VitForward = (() => {
  function decode(base64) {
    // little-endian float32 bytes, as numpy's tobytes() wrote them
    let bytes;
    if (typeof atob === "function") {
      const text = atob(base64);
      bytes = new Uint8Array(text.length);
      for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    } else {
      bytes = new Uint8Array(Buffer.from(base64, "base64"));
    }
    return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  }

  function weights(model) {
    // name -> Float32Array view into the model's one blob (decoded once)
    if (!model._tensors) {
      const blob = decode(model.blob);
      model._tensors = {};
      for (const [name, [offset, shape]] of Object.entries(model.tensors)) {
        const size = shape.reduce((a, b) => a * b, 1);
        model._tensors[name] = blob.subarray(offset, offset + size);
      }
    }
    return model._tensors;
  }

  function linear(x, rows, inF, w, b, outF) {
    // (rows, inF) @ (outF, inF)^T + b -> (rows, outF)
    const out = new Float32Array(rows * outF);
    for (let r = 0; r < rows; r++) {
      const xo = r * inF;
      for (let o = 0; o < outF; o++) {
        let s = b ? b[o] : 0;
        const wo = o * inF;
        for (let i = 0; i < inF; i++) s += x[xo + i] * w[wo + i];
        out[r * outF + o] = s;
      }
    }
    return out;
  }

  function layerNorm(x, rows, d, w, b, eps) {
    const out = new Float32Array(rows * d);
    for (let r = 0; r < rows; r++) {
      const o = r * d;
      let mean = 0;
      for (let i = 0; i < d; i++) mean += x[o + i];
      mean /= d;
      let v = 0;
      for (let i = 0; i < d; i++) v += (x[o + i] - mean) ** 2;
      const inv = 1 / Math.sqrt(v / d + eps);
      for (let i = 0; i < d; i++) out[o + i] = (x[o + i] - mean) * inv * w[i] + b[i];
    }
    return out;
  }

  function erf(x) {
    // Taylor series near 0, a continued fraction for erfc further out: double precision throughout
    const z = Math.abs(x);
    let r;
    if (z < 2.5) {
      let term = z, sum = z;
      for (let n = 1; n < 80; n++) {
        term *= -z * z / n;
        const add = term / (2 * n + 1);
        sum += add;
        if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
      }
      r = sum * 2 / Math.sqrt(Math.PI);
    } else {
      let f = z;
      for (let n = 60; n >= 1; n--) f = z + (n / 2) / f;
      r = 1 - Math.exp(-z * z) / (Math.sqrt(Math.PI) * f);
    }
    return x < 0 ? -r : r;
  }

  const ACTIVATIONS = {
    gelu: (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)),
    gelu_tanh: (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x))),
    quick_gelu: (x) => x / (1 + Math.exp(-1.702 * x)),
  };

  function conv2d(x, c, h, w, weight, bias, co, k, stride, pad) {
    // (c, h, w) -> (co, ho, wo), zero padding
    const ho = Math.floor((h + 2 * pad - k) / stride) + 1, wo = Math.floor((w + 2 * pad - k) / stride) + 1;
    const out = new Float32Array(co * ho * wo);
    for (let o = 0; o < co; o++) {
      for (let y = 0; y < ho; y++) {
        for (let xx = 0; xx < wo; xx++) {
          let s = bias ? bias[o] : 0;
          for (let i = 0; i < c; i++) {
            for (let ky = 0; ky < k; ky++) {
              const iy = y * stride + ky - pad;
              if (iy < 0 || iy >= h) continue;
              for (let kx = 0; kx < k; kx++) {
                const ix = xx * stride + kx - pad;
                if (ix < 0 || ix >= w) continue;
                s += x[(i * h + iy) * w + ix] * weight[((o * c + i) * k + ky) * k + kx];
              }
            }
          }
          out[(o * ho + y) * wo + xx] = s;
        }
      }
    }
    return { out, ho, wo };
  }

  function stem(model, pixels, h, w) {
    // image (3, H, W) -> patch embeddings (N, D) in raster order
    const cfg = model.config, t = weights(model), d = cfg.embed_dim;
    let x = pixels, c = cfg.in_chans, hh = h, ww = w;
    if (cfg.stem === "conv") {
      cfg.conv_stem.forEach(([co, stride], i) => {
        const p = `patch_embed.convs.${i}.`;
        const r = conv2d(x, c, hh, ww, t[p + "0.weight"], null, co, 3, stride, 1);
        const mean = t[p + "1.running_mean"], vr = t[p + "1.running_var"], g = t[p + "1.weight"], b = t[p + "1.bias"];
        const hw = r.ho * r.wo;
        for (let o = 0; o < co; o++) {
          const inv = 1 / Math.sqrt(vr[o] + cfg.bn_eps);
          for (let j = 0; j < hw; j++) r.out[o * hw + j] = Math.max(0, (r.out[o * hw + j] - mean[o]) * inv * g[o] + b[o]);
        }
        x = r.out; c = co; hh = r.ho; ww = r.wo;
      });
    }
    const k = cfg.stem === "conv" ? 1 : cfg.patch_size;
    const r = conv2d(x, c, hh, ww, t["patch_embed.proj.weight"], t["patch_embed.proj.bias"] || null, d, k, k, 0);
    const n = r.ho * r.wo, out = new Float32Array(n * d);
    for (let o = 0; o < d; o++) for (let j = 0; j < n; j++) out[j * d + o] = r.out[o * n + j];
    return { patches: out, grid: [r.ho, r.wo] };
  }

  function softmaxRow(row) {
    let m = -Infinity;
    for (const v of row) m = Math.max(m, v);
    let s = 0;
    const e = new Float64Array(row.length);
    for (let i = 0; i < row.length; i++) { e[i] = Math.exp(row[i] - m); s += e[i]; }
    for (let i = 0; i < row.length; i++) row[i] = e[i] / s;
  }

  function mixHeads(a, heads, t, w, b) {
    // talking heads: a (heads, t, t) mixed over the head axis by a heads x heads linear map
    const out = new Float32Array(a.length), plane = t * t;
    for (let o = 0; o < heads; o++) {
      for (let j = 0; j < plane; j++) {
        let s = b[o];
        for (let h = 0; h < heads; h++) s += w[o * heads + h] * a[h * plane + j];
        out[o * plane + j] = s;
      }
    }
    return out;
  }

  function selfAttention(model, i, xn, t, keep) {
    // one block's multi-head self-attention on the normed tokens xn (T, D): its output (T, D), the attention
    // probabilities (heads, T, T), the scores before the softmax and q, k, v (T, 3D: q, k, v, each head-major)
    const cfg = model.config, w = weights(model), d = cfg.embed_dim, nh = cfg.num_heads, hd = d / nh;
    const p = `blocks.${i}.attn.`;
    const qkv = linear(xn, t, d, w[p + "qkv.weight"], w[p + "qkv.bias"], 3 * d);
    const scale = Math.fround(1 / Math.sqrt(hd));
    let scores = new Float32Array(nh * t * t);
    for (let h = 0; h < nh; h++) {
      for (let a = 0; a < t; a++) {
        const qa = new Float32Array(hd);
        for (let j = 0; j < hd; j++) qa[j] = qkv[a * 3 * d + h * hd + j] * scale;
        for (let b = 0; b < t; b++) {
          let s = 0;
          for (let j = 0; j < hd; j++) s += qa[j] * qkv[b * 3 * d + d + h * hd + j];
          scores[(h * t + a) * t + b] = s;
        }
      }
    }
    if (cfg.talking_heads) scores = mixHeads(scores, nh, t, w[p + "proj_l.weight"], w[p + "proj_l.bias"]);
    let probs = new Float32Array(scores);
    for (let r = 0; r < nh * t; r++) softmaxRow(probs.subarray(r * t, (r + 1) * t));
    if (cfg.talking_heads) probs = mixHeads(probs, nh, t, w[p + "proj_w.weight"], w[p + "proj_w.bias"]);
    const heads = new Float32Array(t * d);  // (T, heads * hd), each head's output, masked
    for (let h = 0; h < nh; h++) {
      for (let a = 0; a < t; a++) {
        for (let j = 0; j < hd; j++) {
          let s = 0;
          for (let b = 0; b < t; b++) s += probs[(h * t + a) * t + b] * qkv[b * 3 * d + 2 * d + h * hd + j];
          heads[a * d + h * hd + j] = s * keep[h];
        }
      }
    }
    const out = linear(heads, t, d, w[p + "proj.weight"], w[p + "proj.bias"] || null, d);
    return { out, probs, scores, qkv };
  }

  function mlp(model, prefix, x, rows, hidden) {
    const cfg = model.config, w = weights(model), d = cfg.embed_dim, act = ACTIVATIONS[cfg.mlp];
    const h = linear(x, rows, d, w[prefix + "fc1.weight"], w[prefix + "fc1.bias"] || null, hidden);
    for (let i = 0; i < h.length; i++) h[i] = act(h[i]);
    return linear(h, rows, hidden, w[prefix + "fc2.weight"], w[prefix + "fc2.bias"] || null, d);
  }

  function addBranch(x, branch, gamma, d) {
    // x += gamma * branch (LayerScale), in place
    for (let i = 0; i < x.length; i++) x[i] += gamma ? Math.fround(branch[i] * gamma[i % d]) : branch[i];
  }

  function classAttentionBlock(model, j, x, cls, n, keep) {
    // CaiT: [CLS] (D) attends over [CLS; patches]; only [CLS] changes. Returns the new [CLS] and the
    // probabilities (heads, 1 + N)
    const cfg = model.config, w = weights(model), d = cfg.embed_dim, nh = cfg.num_heads, hd = d / nh;
    const p = `class_blocks.${j}.`, eps = cfg.layer_norm_eps;
    const u = new Float32Array((1 + n) * d);
    u.set(cls, 0);
    u.set(x, d);
    const un = layerNorm(u, 1 + n, d, w[p + "norm1.weight"], w[p + "norm1.bias"], eps);
    const q = linear(un.subarray(0, d), 1, d, w[p + "attn.q.weight"], w[p + "attn.q.bias"] || null, d);
    const k = linear(un, 1 + n, d, w[p + "attn.k.weight"], w[p + "attn.k.bias"] || null, d);
    const v = linear(un, 1 + n, d, w[p + "attn.v.weight"], w[p + "attn.v.bias"] || null, d);
    const scale = Math.fround(1 / Math.sqrt(hd));
    const probs = new Float32Array(nh * (1 + n)), heads = new Float32Array(d);
    for (let h = 0; h < nh; h++) {
      const row = probs.subarray(h * (1 + n), (h + 1) * (1 + n));
      for (let b = 0; b <= n; b++) {
        let s = 0;
        for (let c = 0; c < hd; c++) s += Math.fround(q[h * hd + c] * scale) * k[b * d + h * hd + c];
        row[b] = s;
      }
      softmaxRow(row);
      for (let c = 0; c < hd; c++) {
        let s = 0;
        for (let b = 0; b <= n; b++) s += row[b] * v[b * d + h * hd + c];
        heads[h * hd + c] = s * keep[h];
      }
    }
    const out = linear(heads, 1, d, w[p + "attn.proj.weight"], w[p + "attn.proj.bias"], d);
    const next = new Float32Array(cls);
    addBranch(next, out, w[p + "ls1.gamma"], d);
    const hidden = Math.floor(d * cfg.class_attn_mlp_ratio);
    const m = mlp(model, p + "mlp.", layerNorm(next, 1, d, w[p + "norm2.weight"], w[p + "norm2.bias"], eps), 1, hidden);
    addBranch(next, m, w[p + "ls2.gamma"], d);
    return { cls: next, probs, q, k, v };
  }

  function forward(model, pixels, h, w, options) {
    // pixels: (3, H, W) preprocessed; options.mask: patch indices to [MASK]; options.off: [[layer, head], ...]
    // switched off (layers count the class-attention blocks after the self-attention blocks)
    const cfg = model.config, t = weights(model), d = cfg.embed_dim, eps = cfg.layer_norm_eps;
    const { patches, grid } = stem(model, pixels, h, w);
    const n = grid[0] * grid[1];
    for (const i of (options && options.mask) || []) if (i >= 0 && i < n) patches.set(t.mask_token, i * d);
    const prefix = cfg.prefix_names.map((name) => t[`${name}_token`] || t["reg_token"].subarray(
      Number(name.slice(3)) * d, (Number(name.slice(3)) + 1) * d));
    const tokens = prefix.length + n;
    let x = new Float32Array(tokens * d);
    prefix.forEach((row, i) => x.set(row, i * d));
    x.set(patches, prefix.length * d);
    const pe = t[`pos_embed@${grid[0]}x${grid[1]}`];
    if (cfg.has_pos_embed && !pe) throw new Error(`no position embedding for a ${grid[0]}x${grid[1]} grid`);
    if (pe) for (let i = 0; i < x.length; i++) x[i] += pe[i];
    if (cfg.pre_norm) x = layerNorm(x, tokens, d, t["norm_pre.weight"], t["norm_pre.bias"], eps);
    const layers = cfg.depth + cfg.class_attn_depth;
    const keep = Array.from({ length: layers }, () => new Float32Array(cfg.num_heads).fill(1));
    for (const [l, hh] of (options && options.off) || []) if (l < layers && hh < cfg.num_heads) keep[l][hh] = 0;
    const blocks = [];
    for (let i = 0; i < cfg.depth; i++) {
      const p = `blocks.${i}.`;
      const a = selfAttention(model, i, layerNorm(x, tokens, d, t[p + "norm1.weight"], t[p + "norm1.bias"], eps),
                              tokens, keep[i]);
      addBranch(x, a.out, t[p + "ls1.gamma"], d);
      const m = mlp(model, p + "mlp.", layerNorm(x, tokens, d, t[p + "norm2.weight"], t[p + "norm2.bias"], eps),
                    tokens, Math.floor(d * cfg.mlp_ratio));
      addBranch(x, m, t[p + "ls2.gamma"], d);
      blocks.push({ probs: a.probs, scores: a.scores, qkv: a.qkv });
    }
    const classBlocks = [];
    let seq = x, rows = tokens;
    if (cfg.class_attn_depth) {
      let cls = t["cls_token"];
      for (let j = 0; j < cfg.class_attn_depth; j++) {
        const r = classAttentionBlock(model, j, x, cls, n, keep[cfg.depth + j]);
        cls = r.cls;
        classBlocks.push(r);
      }
      seq = new Float32Array((1 + n) * d);
      seq.set(cls, 0);
      seq.set(x, d);
      rows = 1 + n;
    }
    const heads = {};
    const head = (name, vector) => linear(vector, 1, cfg.pooled_dim, t[name + ".weight"], t[name + ".bias"],
                                          cfg.num_classes);
    const prefixCount = cfg.class_attn_depth ? 1 : prefix.length;
    // the final norm on every token, or (fc_norm) none there and one on the pooled vector
    const norm = (v, n) => (cfg.fc_norm ? v : layerNorm(v, n, d, t["norm.weight"], t["norm.bias"], eps));
    let pooled;
    if (cfg.pool === "gap") {
      const normed = norm(seq, rows);
      pooled = new Float32Array(d);
      for (let r = prefixCount; r < rows; r++) for (let i = 0; i < d; i++) pooled[i] += normed[r * d + i];
      for (let i = 0; i < d; i++) pooled[i] /= rows - prefixCount;
      if (cfg.fc_norm) pooled = layerNorm(pooled, 1, d, t["fc_norm.weight"], t["fc_norm.bias"], eps);
    } else {
      pooled = norm(seq.subarray(0, d), 1);
    }
    heads[cfg.pool] = head("head", pooled);
    if (cfg.dist_head) heads.dist = head("head_dist", norm(seq.subarray(d, 2 * d), 1));
    let logits = heads[cfg.pool];
    if (heads.dist) logits = logits.map((v, i) => (v + heads.dist[i]) / 2);
    return { logits, heads, blocks, classBlocks, grid, prefix: cfg.prefix_names, tokens };
  }

  function softmax(values) {
    const out = new Float64Array(values);
    softmaxRow(out);
    return out;
  }

  function rollout(result) {
    // attention rollout (analysis/attention.py): per block the mean over heads, plus the identity, rows
    // renormalised; the [CLS] row multiplied back through the blocks; CaiT first through its class-attention
    // blocks. Returns (N) over the patches.
    const t = result.tokens, nh = result.blocks.length ? result.blocks[0].probs.length / (t * t) : 0;
    const step = (probs) => {
      const a = new Float64Array(t * t);
      for (let h = 0; h < nh; h++) for (let i = 0; i < t * t; i++) a[i] += probs[h * t * t + i];
      for (let r = 0; r < t; r++) {
        let s = 0;
        for (let c = 0; c < t; c++) {
          a[r * t + c] = (a[r * t + c] / nh + (r === c ? 1 : 0)) / 2;
          s += a[r * t + c];
        }
        for (let c = 0; c < t; c++) a[r * t + c] /= s;
      }
      return a;
    };
    const back = (vector, probs) => {
      const a = step(probs), out = new Float64Array(t);
      for (let r = 0; r < t; r++) for (let c = 0; c < t; c++) out[c] += vector[r] * a[r * t + c];
      return out;
    };
    let vector;
    const blocks = result.blocks.slice();
    if (result.classBlocks.length) {
      let row = null;
      for (const b of result.classBlocks) {
        const heads = b.probs.length / (t + 1), r = new Float64Array(t + 1);
        for (let h = 0; h < heads; h++) for (let i = 0; i <= t; i++) r[i] += b.probs[h * (t + 1) + i];
        let s = 0;
        for (let i = 0; i <= t; i++) { r[i] /= heads; if (i === 0) r[i] += 1; s += r[i]; }
        for (let i = 0; i <= t; i++) r[i] /= s;
        row = row === null ? r : Float64Array.from(r, (v, i) => (i === 0 ? r[0] * row[0] : r[0] * row[i] + v));
      }
      vector = row.subarray(1);
    } else {
      vector = new Float64Array(t);
      const last = step(blocks.pop().probs);
      for (let c = 0; c < t; c++) vector[c] = last[c];  // the [CLS] row
    }
    for (const b of blocks.reverse()) vector = back(vector, b.probs);
    return Float64Array.from(vector.subarray(result.prefix.length));
  }

  return { decode, erf, forward, rollout, softmax, weights };
})();

if (typeof module !== "undefined") module.exports = VitForward;
