"""The site's behaviour in Chromium: the home page, search (each reproduced error, pasted, finds its
page first) and the palette switch; the scaling
explorer's JavaScript against the Python cost model; the quiz graded in the page."""

from __future__ import annotations

import json
import re

import pytest

from docexec.fences import REPO

# Each error a page reproduces, as a reader pastes its first line into the search box, and the page that
# reproduces it: the site's search must list that page first (test_home_page_and_search_in_chromium).
CONVERT, DEBUGGING = "multi-gpu/convert-your-script/", "multi-gpu/debugging/"
PASTED_ERRORS = {
    "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation": (
        CONVERT
    ),
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.": CONVERT,
    "RuntimeError: Error(s) in loading state_dict for Linear:": CONVERT,
    'Missing key(s) in state_dict: "weight", "bias"': CONVERT,
    "RuntimeError: Detected mismatch between collectives on ranks.": DEBUGGING,
    "Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?": (
        DEBUGGING
    ),
    "Timed out waiting 60000ms for recv operation to complete": DEBUGGING,
    "Rank 1 failed to pass monitoredBarrier in 10000 ms": DEBUGGING,
    "ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable RANK expected, "
    "but not set": DEBUGGING,
    "error: unrecognized arguments: --local-rank=0": DEBUGGING,
    "ValueError: Default process group has not been initialized, please make sure to call init_process_group.": (
        DEBUGGING
    ),
    "DataLoader worker (pid 8172) is killed by signal: Bus error.": DEBUGGING,
    "RuntimeError: unable to allocate shared memory(shm) for file </torch_4881_1997839460_0>: "
    "No space left on device (28)": DEBUGGING,
}


@pytest.mark.fast
def test_every_pasted_error_is_printed_on_the_page_it_should_find():
    """The list above holds lines the pages show, as a run printed them (an Excerpt, an Output, an inline
    block that asserts the message): a reworded page fails here before the search test runs."""
    for line, where in PASTED_ERRORS.items():
        text = " ".join((REPO / "docs" / f"{where.rstrip('/')}.md").read_text().split())
        assert line in text, f"docs/{where.rstrip('/')}.md no longer shows {line!r}"


@pytest.mark.site
def test_home_page_and_search_in_chromium(browser, served_site):
    from playwright.sync_api import expect

    requests, errors = [], []
    page = browser.new_page()
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(served_site, wait_until="networkidle")
    expect(page).to_have_title(re.compile("distdocs"))
    expect(page.locator("h1")).to_contain_text("distdocs")

    search = page.locator("input.md-search__input")
    search.focus()  # opens the search; the index loads in a web worker
    # A query typed before the index is ready is not run again, so wait for it first.
    expect(page.locator(".md-search-result__meta")).to_have_text(re.compile("Type to start searching"), timeout=15_000)
    search.press_sequentially("data parallelism", delay=20)  # real key events, as a reader types
    hit = page.locator(".md-search-result__item a[href*='lesson/data-parallelism/']").first
    expect(hit).to_be_visible(timeout=15_000)

    for line, where in PASTED_ERRORS.items():  # each reproduced error, pasted: its page comes first
        search.fill("")
        search.press("End")  # Material searches on keyup
        expect(page.locator(".md-search-result__meta")).to_have_text(re.compile("Type to start searching"))
        search.fill(line)
        search.press("End")
        first = page.locator(".md-search-result__item > a").first
        try:
            expect(first).to_have_attribute("href", re.compile(re.escape(where)), timeout=5_000)
        except AssertionError:
            found = page.locator(".md-search-result__item > a").evaluate_all("a => a.map(e => e.href).slice(0, 3)")
            raise AssertionError(f"searching {line!r} lists {found} first, not {where}") from None

    scheme = page.locator("body").get_attribute("data-md-color-scheme")
    page.keyboard.press("Escape")
    page.locator("form[data-md-component=palette] label:visible").first.click()
    expect(page.locator("body")).not_to_have_attribute("data-md-color-scheme", scheme)
    assert not errors, f"console errors: {errors}"
    foreign = [u for u in requests if not u.startswith(served_site) and not u.startswith(("data:", "blob:"))]
    assert not foreign, f"requests to other hosts: {foreign}"


def _random_cases(count: int) -> list:
    import random

    rng = random.Random(0)
    cases = []
    for _ in range(count):
        work = {
            "params": 10 ** rng.uniform(4, 11),
            "computePerSample": 10 ** rng.uniform(-7, -1),
            "microBatch": rng.randint(1, 4096),
            "accumulation": rng.randint(1, 16),
            "gradientDtype": rng.choice(["fp32", "bf16"]),
            "bucketBytes": rng.choice([2**20, 25 * 2**20, 100 * 2**20]),
            "overlap": rng.random() < 0.5,
        }
        net = {"alpha": 10 ** rng.uniform(-7, -3), "beta": 1 / 10 ** rng.uniform(8, 12)}
        net["concurrent"] = rng.choice([1, 2])  # NCCL's one allreduce at a time, or gloo's two
        sizes = [1, 2, 3, 5, 8, 64, 1000]
        if rng.random() < 0.5:  # workers on nodes: a faster link inside, whole nodes only
            net["ranksPerNode"] = rng.choice([1, 2, 4, 8])
            net["inside"] = {"alpha": 10 ** rng.uniform(-7, -5), "beta": 1 / 10 ** rng.uniform(10, 12)}
            sizes = [1, 2, 4, 8, 64, 1024]
        cases.append((work, net, rng.choice(["ring", "two-level", "tree", "naive"]), sizes))
    return cases


@pytest.mark.site
def test_scaling_explorer_is_the_python_cost_model_and_redraws_when_a_control_moves(browser, served_site):
    """The page's JavaScript port equals distdocs.calculators.costmodel within 1e-9 relative on 300 random
    inputs; moving a control (typing a bandwidth, pressing a key) redraws the curve that the
    Python model gives for the new settings; a measured run sets the controls and marks its
    measured speedup against the curve."""
    from distdocs.calculators.costmodel import Network, Workload, predict_steps

    def python(work: dict, net: dict, algorithm: str, sizes: list) -> list:
        w = Workload(
            work["params"],
            work["computePerSample"],
            work["microBatch"],
            work["accumulation"],
            work["gradientDtype"],
            work["bucketBytes"],
            work["overlap"],
        )
        inside = Network(net["inside"]["alpha"], net["inside"]["beta"]) if "inside" in net else None
        between = Network(net["alpha"], net["beta"], concurrent=net.get("concurrent", 1))
        return predict_steps(w, sizes, between, algorithm, net.get("ranksPerNode", 1), inside)

    cases = _random_cases(300)
    errors = []
    page = browser.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    # Its weight is held with every other page's, at gzip sizes, by the page-weight test.
    page.goto(served_site + "lab/scaling-explorer/", wait_until="networkidle")
    got = page.evaluate(
        "cases => cases.map(([w, n, a, s]) => window.distdocsCostModel.predictSteps(w, s, n, a)"
        ".map(r => [r.step, r.exposed, r.speedup, r.efficiency]))",
        cases,
    )
    for case, js in zip(cases, got):
        for r, values in zip(python(*case), js):
            assert values == pytest.approx([r.step, r.exposed_sync, r.speedup, r.efficiency], rel=1e-9), case

    speedups = lambda: json.loads(page.locator("#explorer-app").get_attribute("data-speedups"))  # noqa: E731
    sizes = [2**i for i in range(11)]  # the page's default: up to 1024 workers
    defaults = {"params": 100e6, "computePerSample": 1e-5, "microBatch": 2048, "accumulation": 1,
                "gradientDtype": "fp32", "bucketBytes": 25 * 2**20, "overlap": True}  # fmt: skip
    pcie = {"alpha": 10 * 1e-6, "beta": 1 / (25 * 1e9)}  # the first preset, distdocs' pcie4
    assert speedups() == pytest.approx([r.speedup for r in python(defaults, pcie, "ring", sizes)], rel=1e-9)

    page.fill("#explorer-bandwidth", "100")  # four times the bandwidth
    faster = {**pcie, "beta": 1 / (100 * 1e9)}
    assert speedups() == pytest.approx([r.speedup for r in python(defaults, faster, "ring", sizes)], rel=1e-9)

    page.focus("#explorer-accumulation")
    page.keyboard.press("ArrowUp")  # keyboard alone: accumulate 2 micro-batches
    more = {**defaults, "accumulation": 2}
    assert speedups() == pytest.approx([r.speedup for r in python(more, faster, "ring", sizes)], rel=1e-9)
    label = page.locator("#explorer-chart").get_attribute("aria-label")
    assert "at 1024 workers" in label

    # Workers on nodes of 8, the cost model's NVLink preset inside each (the page's default inside
    # link), the link above between them: the flat ring, then the two-level allreduce.
    from distdocs.calculators.costmodel import PRESETS

    inside = {"alpha": PRESETS["nvlink4"].alpha, "beta": PRESETS["nvlink4"].beta}
    page.select_option("#explorer-ranks-per-node", "8")
    on_nodes = {**faster, "ranksPerNode": 8, "inside": inside}
    assert speedups() == pytest.approx([r.speedup for r in python(more, on_nodes, "ring", sizes)], rel=1e-9)
    page.select_option("#explorer-algorithm", "two-level")
    two_level = [r.speedup for r in python(more, on_nodes, "two-level", sizes)]
    assert speedups() == pytest.approx(two_level, rel=1e-9)
    assert two_level[-1] > python(more, on_nodes, "ring", sizes)[-1].speedup  # less across the slow link
    page.select_option("#explorer-algorithm", "ring")
    page.select_option("#explorer-ranks-per-node", "1")

    # A measured run sets the controls to its workload and link; its diamonds are what it measured, for
    # the accumulation counts measured, and go when the controls no longer describe the run. The scale
    # model's run: 1 to 8 workers, overlapped, gloo's two allreduces at once.
    from hooks.explorer_presets import measured_runs

    run = measured_runs()["scale-100mbit"]
    measured = lambda: page.locator("#explorer-app").get_attribute("data-measured")  # noqa: E731
    page.select_option("#explorer-run", "scale-100mbit")
    work = {**defaults, "params": run["params"], "computePerSample": run["computePerSample"],
            "microBatch": run["microBatch"], "overlap": True}  # fmt: skip
    link = {"alpha": run["alpha"], "beta": run["beta"], "concurrent": 2}
    assert speedups() == pytest.approx([r.speedup for r in python(work, link, "ring", sizes)], rel=1e-9)
    assert json.loads(measured()) == [[n, pytest.approx(s, rel=1e-12)] for n, s in run["points"]["1"]]
    assert [n for n, _ in run["points"]["1"]] == [2, 4, 8]
    assert "diamonds mark what was measured" in page.locator("#explorer-chart").get_attribute("aria-label")
    page.fill("#explorer-accumulation", "16")
    assert json.loads(measured()) == [[n, pytest.approx(s, rel=1e-12)] for n, s in run["points"]["16"]]
    page.fill("#explorer-accumulation", "3")  # not measured: no diamond, the run stays chosen
    assert measured() is None and page.input_value("#explorer-run") == "scale-100mbit"
    page.fill("#explorer-bandwidth", "1")  # another network: the run no longer applies
    page.fill("#explorer-accumulation", "16")
    assert measured() is None and page.input_value("#explorer-run") == ""
    assert not errors, errors


@pytest.mark.site
def test_quiz_grades_a_right_and_a_wrong_answer_in_chromium(browser, served_site):
    """The final quiz, answered in the browser: the seed's first question right, its second wrong.
    Each shows its verdict and the chosen answer's explanation."""
    from playwright.sync_api import expect

    errors = []
    page = browser.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(served_site + "reference/quiz/", wait_until="networkidle")
    right, wrong = page.locator("#quiz-0"), page.locator("#quiz-1")
    expect(right.locator(".quiz-question")).to_contain_text("speedup plateaus")
    expect(wrong.locator(".quiz-question")).to_contain_text("Among models that fit on one GPU")

    right.locator("label[for=quiz-0-1]").click()  # gradient synchronization: right
    expect(right.locator("div:has(> #quiz-0-1)")).to_have_class(re.compile(r"\bcorrect\b"))
    expect(right.locator(".quiz-feedback")).to_be_visible()
    expect(right.locator(".quiz-feedback")).to_contain_text("Right. With the global batch fixed")

    wrong.locator("label[for=quiz-1-0]").click()  # "True": wrong
    expect(wrong.locator("div:has(> #quiz-1-0)")).to_have_class(re.compile(r"\bwrong\b"))
    expect(wrong.locator("div:has(> #quiz-1-1)")).to_have_class(re.compile(r"\bcorrect\b"))  # shown
    expect(wrong.locator(".quiz-feedback")).to_be_visible()
    expect(wrong.locator(".quiz-feedback")).to_contain_text("that short computation cannot cover")
    assert not errors, errors


@pytest.mark.fast
def test_the_final_quiz_asks_the_seed_questions_with_their_answers():
    page = (REPO / "docs/reference/quiz.md").read_text()
    assert "The most common reason parallel training speedup plateaus is" in page
    assert "- [x] gradient synchronization" in page
    assert "Among models that fit on one GPU, the small ones usually benefit the most from data parallelism." in page
    assert "- [x] False" in page and "- [ ] True" in page
    assert page.count("<quiz>") >= 8 and "all of the above" not in page.lower()
