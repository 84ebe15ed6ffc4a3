/* The scaling explorer: distdocs.calculators.costmodel ported line for line, and a chart drawn as plain SVG.
   tests/test_site_browser.py checks this port against the Python model on random inputs in Chromium.
   No library and no network: the page works offline. */
(function () {
  "use strict";

  const GRADIENT_BYTES = { fp32: 4, bf16: 2 };
  const BACKWARD_SHARE = 2 / 3;
  const FIRST_BUCKET_BYTES = 2 ** 20; // DDP's first bucket, with bucket_cap_mb at its default

  function allreduceTerms(n, algorithm) {
    if (algorithm === "ring" || algorithm === "two-level") return [2 * (n - 1), (2 * (n - 1)) / n];
    if (algorithm === "tree") {
      const rounds = n > 1 ? 2 * Math.ceil(Math.log2(n)) : 0;
      return [rounds, rounds];
    }
    if (algorithm === "naive") return [2 * (n - 1), 2 * (n - 1)];
    throw new Error("unknown algorithm " + algorithm);
  }

  function allreduceSeconds(nbytes, n, net, algorithm) {
    const [messages, factor] = allreduceTerms(n, algorithm);
    return nbytes ? messages * net.alpha + factor * nbytes * net.beta : 0;
  }

  function flatRingOnNodesSeconds(nbytes, k, nodes, inside, between) {
    const n = k * nodes;
    if (n === 1 || !nbytes) return 0;
    const link = nodes > 1 ? between : inside;
    return 2 * (n - 1) * (link.alpha + (nbytes / n) * link.beta);
  }

  function twoLevelSeconds(nbytes, k, nodes, inside, between) {
    if (!nbytes) return 0;
    const within = (k - 1) * (inside.alpha + (nbytes / k) * inside.beta);
    const across = 2 * (nodes - 1) * (between.alpha + (nbytes / (k * nodes)) * k * between.beta);
    return 2 * within + across;
  }

  // net: {alpha, beta} between nodes, and optionally ranksPerNode and inside: {alpha, beta}
  function allreduceOnNodesSeconds(nbytes, n, net, algorithm) {
    const k = Math.min(net.ranksPerNode || 1, n);
    if (k <= 1 || !net.inside) return allreduceSeconds(nbytes, n, net, algorithm);
    if (n % k) throw new Error(n + " ranks do not fill nodes of " + net.ranksPerNode);
    if (n === k) return allreduceSeconds(nbytes, n, net.inside, algorithm);
    if (algorithm === "ring") return flatRingOnNodesSeconds(nbytes, k, n / k, net.inside, net);
    if (algorithm === "two-level") return twoLevelSeconds(nbytes, k, n / k, net.inside, net);
    return allreduceSeconds(nbytes, n, net, algorithm);
  }

  // DDP's buckets, in the order backward fills them: the first up to 1 MiB, the others up to bucketBytes
  // (distdocs.calculators.costmodel.ddp_buckets, for a gradient of many small parameters).
  function ddpBuckets(gradientBytes, bucketBytes, firstBucketBytes) {
    const buckets = [];
    let left = gradientBytes;
    let limit = firstBucketBytes;
    while (left > 0) {
      buckets.push(Math.min(limit, left));
      left -= buckets[buckets.length - 1];
      limit = bucketBytes;
    }
    return buckets.length ? buckets : [0];
  }

  // work: {params, computePerSample, microBatch, accumulation, gradientDtype, bucketBytes, overlap};
  // net.concurrent: the allreduces the backend runs at once (1 for NCCL, 2 for gloo; default 1).
  function stepTime(work, n, net, algorithm) {
    const compute = work.computePerSample * work.microBatch * work.accumulation;
    const gradientBytes = work.params * GRADIENT_BYTES[work.gradientDtype];
    const sizes = ddpBuckets(gradientBytes, work.bucketBytes, work.firstBucketBytes || FIRST_BUCKET_BYTES);
    const seconds = (b) => allreduceOnNodesSeconds(b, n, net, algorithm);
    const times = sizes.map(seconds);
    const sync = times.reduce((a, b) => a + b, 0);
    // Each bucket is ready when backward has produced the bytes up to its end (without overlap, when
    // backward ends); its allreduce starts when a lane is free, and its bytes follow the previous one's.
    const lanes = net.concurrent || 1;
    const window = BACKWARD_SHARE * work.computePerSample * work.microBatch;
    const latency = 2 * seconds(1) - seconds(2);
    const total = sizes.reduce((a, b) => a + b, 0);
    const ends = [];
    let filled = 0;
    sizes.forEach((b, i) => {
      filled += b;
      const ready = total && work.overlap ? window * (filled / total) : window;
      const start = ends.length >= lanes ? Math.max(ready, ends[ends.length - lanes]) : ready;
      const previous = ends.length ? ends[ends.length - 1] : 0;
      ends.push(Math.max(start + times[i], previous + times[i] - latency));
    });
    const exposed = ends.length ? Math.max(0, ends[ends.length - 1] - window) : 0;
    const samples = n * work.microBatch * work.accumulation;
    return { n, compute, sync, exposed, step: compute + exposed, samplesPerS: samples / (compute + exposed) };
  }

  function predictSteps(work, sizes, net, algorithm) {
    const one = stepTime(work, 1, net, algorithm).samplesPerS;
    return sizes.map((n) => {
      const s = stepTime(work, n, net, algorithm);
      return Object.assign(s, { speedup: s.samplesPerS / one, efficiency: s.samplesPerS / (one * n) });
    });
  }

  window.distdocsCostModel = { allreduceTerms, allreduceSeconds, allreduceOnNodesSeconds, stepTime, predictSteps };
})();

/* The page: read the controls, run the model at 1, 2, 4, ... workers, draw speedup against workers. */
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const W = 640, H = 360, LEFT = 56, RIGHT = 16, TOP = 16, BOTTOM = 48;

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  function init() {
    const root = document.getElementById("explorer-app");
    if (!root) return;
    const presets = JSON.parse(document.getElementById("explorer-presets").textContent);
    // By the end of the id: the print page prefixes the ids that links point at with the page's name.
    const field = (id) => root.querySelector('[id$="explorer-' + id + '"]');
    const addOptions = (select, entries) => {  // one <option> per entry, named by its `name`
      for (const [key, entry] of Object.entries(entries)) {
        const option = document.createElement("option");
        option.value = key;
        option.textContent = entry.name;
        select.appendChild(option);
      }
    };
    const presetSelect = field("network");
    addOptions(presetSelect, presets);

    // Measured runs (hooks/explorer_presets.py): controls that reproduce a saved run, and the speedups
    // it measured, [workers, speedup] pairs for each accumulation count.
    const runsData = document.getElementById("explorer-runs");
    const runs = runsData ? JSON.parse(runsData.textContent) : {};
    const runSelect = field("run");
    addOptions(runSelect, runs);
    let active = null;

    function useRun() {
      active = runs[runSelect.value] || null;
      if (!active) return;
      field("params").value = String(active.params / 1e6);
      field("compute").value = String(active.computePerSample * 1e3);
      field("batch").value = String(active.microBatch);
      field("accumulation").value = "1";
      field("dtype").value = "fp32";
      field("overlap").checked = active.overlap;
      field("algorithm").value = "ring";
      field("bandwidth").value = String(1 / active.beta / 1e9);
      field("ranks-per-node").value = "1";  // one rank a node: every link is the one measured
      field("latency").value = String(active.alpha * 1e6);
    }

    // The run still describes the controls: all but the accumulation count and the workers unchanged.
    function matches(c) {
      const same = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(Math.abs(a), Math.abs(b));
      const w = c.work, r = active;
      return same(w.params, r.params) && same(w.computePerSample, r.computePerSample) &&
        w.microBatch === r.microBatch && w.gradientDtype === "fp32" && w.overlap === r.overlap &&
        c.algorithm === "ring" &&
        same(c.net.alpha, r.alpha) && same(c.net.beta, r.beta) && c.net.ranksPerNode === 1;
    }

    function usePreset() {
      const p = presets[presetSelect.value];
      field("bandwidth").value = +(1 / p.beta / 1e9).toPrecision(4);
      field("latency").value = +(p.alpha * 1e6).toPrecision(4);
    }

    function read() {
      const num = (id) => Number(field(id).value);
      return {
        work: {
          params: num("params") * 1e6,
          computePerSample: num("compute") / 1e3,
          microBatch: num("batch"),
          accumulation: num("accumulation"),
          gradientDtype: field("dtype").value,
          bucketBytes: 25 * 2 ** 20,
          overlap: field("overlap").checked,
        },
        net: {
          alpha: num("latency") * 1e-6,
          beta: 1 / (num("bandwidth") * 1e9),
          ranksPerNode: num("ranks-per-node"),
          concurrent: active ? active.concurrent : 1,  // a measured run's backend; else one at a time
          inside: { alpha: num("inside-latency") * 1e-6, beta: 1 / (num("inside-bandwidth") * 1e9) },
        },
        algorithm: field("algorithm").value,
        maxWorkers: num("workers"),
      };
    }

    function valid(c) {
      const w = c.work;
      return [w.params, w.computePerSample, w.microBatch, w.accumulation, c.maxWorkers, 1 / c.net.beta,
              1 / c.net.inside.beta].every((v) => Number.isFinite(v) && v > 0) &&
        c.net.alpha >= 0 && c.net.inside.alpha >= 0;
    }

    function draw() {
      const c = read();
      const status = root.querySelector("#explorer-status");
      if (!valid(c)) {
        status.textContent = "Every value must be a positive number (the latency may be 0).";
        return;
      }
      status.textContent = "";
      const sizes = [];
      for (let n = 1; n <= c.maxWorkers; n *= 2) sizes.push(n);
      const rows = window.distdocsCostModel.predictSteps(c.work, sizes, c.net, c.algorithm);
      root.dataset.speedups = JSON.stringify(rows.map((r) => r.speedup));

      const top = Math.max(2, sizes[sizes.length - 1]);
      const x = (n) => LEFT + (Math.log2(n) / Math.log2(top)) * (W - LEFT - RIGHT);
      const y = (s) => H - BOTTOM - (Math.log2(Math.max(s, 0.25)) + 2) / (Math.log2(top) + 2) * (H - TOP - BOTTOM);
      const svg = root.querySelector("#explorer-chart");
      svg.replaceChildren();
      for (let n = 1; n <= top; n *= 2) {
        el("line", { x1: x(n), x2: x(n), y1: TOP, y2: H - BOTTOM, class: "explorer-grid" }, svg);
        el("text", { x: x(n), y: H - BOTTOM + 16, "text-anchor": "middle" }, svg).textContent = n;
      }
      for (let s = 0.25; s <= top; s *= 2) {
        el("line", { x1: LEFT, x2: W - RIGHT, y1: y(s), y2: y(s), class: "explorer-grid" }, svg);
        el("text", { x: LEFT - 6, y: y(s) + 4, "text-anchor": "end" }, svg).textContent = s < 1 ? s : s + "×";
      }
      el("text", { x: (LEFT + W - RIGHT) / 2, y: H - 8, "text-anchor": "middle" }, svg).textContent = "workers";
      el("text", { x: 14, y: (TOP + H - BOTTOM) / 2, "text-anchor": "middle",
                   transform: `rotate(-90 14 ${(TOP + H - BOTTOM) / 2})` }, svg).textContent = "speedup";
      el("line", { x1: x(1), y1: y(1), x2: x(top), y2: y(top), class: "explorer-ideal" }, svg);
      const bound = rows.find((r) => r.exposed > r.compute);
      if (bound) {  // from here on the exposed sync outlasts the computation
        el("line", { x1: x(bound.n), x2: x(bound.n), y1: TOP, y2: H - BOTTOM, class: "explorer-bound" }, svg);
        el("text", { x: x(bound.n) + 4, y: TOP + 12 }, svg).textContent = "sync-bound from here";
      }
      const points = rows.map((r) => `${x(r.n)},${y(r.speedup)}`).join(" ");
      el("polyline", { points, class: "explorer-model" }, svg);
      for (const r of rows) el("circle", { cx: x(r.n), cy: y(r.speedup), r: 3.5, class: "explorer-point" }, svg);
      if (active && !matches(c)) {  // a control moved away from the run: it no longer measures this curve
        active = null;
        runSelect.value = "";
      }
      const measured = ((active && active.points[String(c.work.accumulation)]) || []).filter(([n]) => n <= c.maxWorkers);
      for (const [n, s] of measured) {
        const cx = x(n), cy = y(s);
        el("path", { d: `M${cx},${cy - 7}L${cx + 7},${cy}L${cx},${cy + 7}L${cx - 7},${cy}Z`, class: "explorer-measured" }, svg);
        el("text", { x: cx + 10, y: cy + 4 }, svg).textContent = `measured ${s.toFixed(2)}×`;
      }
      if (measured.length) root.dataset.measured = JSON.stringify(measured);
      else delete root.dataset.measured;
      const where = measured.map(([n, s]) => `${s.toFixed(2)}× at ${n}`).join(", ");
      const last = rows[rows.length - 1];
      svg.setAttribute(
        "aria-label",
        `Modelled speedup against workers, log scales: ${last.speedup.toFixed(2)}× at ${last.n} workers, ` +
          `efficiency ${(100 * last.efficiency).toFixed(0)}%; ` +
          (bound ? `sync-bound from ${bound.n} workers; ` : "") +
          (measured.length ? `diamonds mark what was measured: ${where} workers; ` : "") +
          "the dashed line is the ideal n×."
      );

      const body = root.querySelector("#explorer-table tbody");
      body.replaceChildren();
      for (const r of rows) {
        const tr = document.createElement("tr");
        for (const v of [r.n, (r.compute * 1e3).toFixed(2), (r.exposed * 1e3).toFixed(2), r.speedup.toFixed(2) + "×",
                         (100 * r.efficiency).toFixed(0) + "%"]) {
          const td = document.createElement("td");
          td.textContent = v;
          tr.appendChild(td);
        }
        body.appendChild(tr);
      }
    }

    presetSelect.addEventListener("change", () => { usePreset(); draw(); });
    runSelect.addEventListener("change", () => { useRun(); draw(); });
    root.querySelectorAll("input, select").forEach((i) => {
      if (i !== presetSelect && i !== runSelect) i.addEventListener("input", draw);
    });
    usePreset();
    const nvlink = presets.nvlink4;  // inside a node: the cost model's NVLink preset, until changed
    field("inside-bandwidth").value = +(1 / nvlink.beta / 1e9).toPrecision(4);
    field("inside-latency").value = +(nvlink.alpha * 1e6).toPrecision(4);
    draw();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
