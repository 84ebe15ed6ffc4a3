"""Chromium for the site's tests and for `make pdf`: Debian's /usr/bin/chromium driven by Playwright's
Python package (never `playwright install`, which downloads a browser), and the built site served on
127.0.0.1 at a free port.

    python -m tools.browser pdf SITE_DIR OUT.pdf   # the print page of a built site, as a PDF
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PRINT_PAGE = "print_page/"  # mkdocs-print-site-plugin's whole site on one page


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class GzipHandler(QuietHandler):
    """Text files gzipped, as GitHub Pages serves them, for a browser that asks: what Lighthouse
    should measure, since its timings are simulated from the bytes transferred."""

    TEXT = (".html", ".css", ".js", ".json", ".svg", ".xml", ".txt", ".ipynb", ".py")

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            path = path / "index.html"
        if not (path.suffix in self.TEXT and path.is_file() and "gzip" in self.headers.get("Accept-Encoding", "")):
            super().do_GET()
            return
        body = gzip.compress(path.read_bytes(), compresslevel=6)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def serve_directory(directory: Path, compress: bool = False) -> Iterator[str]:
    """Serve a built site on 127.0.0.1 at a free port, gzipped if `compress`; yields its base URL."""
    handler = functools.partial(GzipHandler if compress else QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def launch_chromium() -> Iterator:
    """A headless Chromium, closed however the caller ends."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def save_pdf(browser, site_url: str, out: Path) -> list[str]:
    """Print the print page to an A4 PDF, as a reader's "Save as PDF" would, in the light scheme.
    Return the start of every code block that print styles clip (wider than its box) or hide (in a
    closed block or a tab), which the PDF would lose: none, on a good build."""
    context = browser.new_context(color_scheme="light")
    try:
        page = context.new_page()
        page.goto(site_url + PRINT_PAGE, wait_until="networkidle")
        page.emulate_media(media="print")
        # Material opens every collapsed block when the page turns to print, from a media-query
        # listener that may not have run yet; open them here so that the PDF never depends on it.
        page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true })")
        clipped = page.evaluate(
            """() => [...document.querySelectorAll('pre > code')]
                .filter(e => e.offsetParent === null || e.scrollWidth > e.clientWidth + 1)
                .map(e => e.textContent.slice(0, 60))"""
        )
        page.pdf(path=str(out), format="A4", print_background=True, outline=True, tagged=True)
        return clipped
    finally:
        context.close()


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "pdf":
        print("usage: python -m tools.browser pdf SITE_DIR OUT.pdf", file=sys.stderr)
        return 2
    site, out = Path(argv[1]), Path(argv[2])
    if not (site / PRINT_PAGE / "index.html").is_file():
        print(f"error: {site} has no {PRINT_PAGE}index.html; build the site first (make build)", file=sys.stderr)
        return 1
    if not Path(CHROMIUM).exists():
        print(f"error: no {CHROMIUM}; install Debian's chromium package (make chromium, as root)", file=sys.stderr)
        return 1
    with serve_directory(site) as url, launch_chromium() as browser:
        clipped = save_pdf(browser, url, out)
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")
    if clipped:
        print(f"error: {len(clipped)} code blocks are clipped or hidden in print: {clipped}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
