"""Screenshot the dashboard of a running tirtune server with Debian's headless Chromium.

    cp bench/data/h200-tune-4096x4096x4096-float16.sqlite /tmp/copy.sqlite
    DATABASE_URL=sqlite:////tmp/copy.sqlite tirtune serve --no-worker --port 8765 &
    python -m bench.dashboard_screenshot http://127.0.0.1:8765/dashboard docs/dashboard-h200.png

Waits until the page has drawn its trials, then saves a full-page PNG. Needs the `playwright`
Python package and a Chromium binary (default /usr/bin/chromium; `playwright install` not needed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("out", type=Path)
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--width", type=int, default=1400)
    args = p.parse_args()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": 900})
        page.goto(args.url)
        page.wait_for_function("Number(document.body.dataset.trials || 0) > 0", timeout=30_000)
        page.wait_for_timeout(500)  # let the charts finish their first paint
        args.out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(args.out), full_page=True)
        browser.close()
    print(f"wrote {args.out}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
