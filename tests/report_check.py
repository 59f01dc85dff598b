"""Checking a Snakemake HTML report the way a reader sees it: in a real browser.

`check_report(html_path, expected_names)` returns a list of problems (empty = fine):

1. Statically, from the report's embedded `results` data: every expected result is there
   (matched by file name, path suffix or label value) and non-empty: a PNG decodes to a
   non-zero size, an HTML table has cells with text, every result has a caption.
2. In headless Chromium (Debian's `chromium`): a copy of the report with a small harness
   script appended drives the report app itself (`app.showResultInfo`, `app.setView`) through
   every result, records what the page shows (caption text, image size and whether its pixels
   vary, table rows rendered), and prints that as JSON into the DOM, which `--dump-dom` returns
   after the scripts ran (`--virtual-time-budget` lets timers run without waiting).
3. A screenshot of the report (`--screenshot`) must be a non-blank PNG.

Used by tests/test_report_html.py on a throwaway workflow, and meant for the real workflow's
report too: `python tests/report_check.py results/report.html --catalog --screenshot results/report.png`.
"""
from __future__ import annotations

import base64
import html as html_lib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "chromium", "chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--mute-audio", "--hide-scrollbars"]
RESULT_MARK = "selfknow-report-check"


def find_chromium() -> str | None:
    for c in CHROMIUM_CANDIDATES:
        p = shutil.which(c)
        if p:
            return p
    return None


def _script_json(page: str, var: str):
    m = re.search(r'<script id="%s">\s*var %s = (.*?);\s*</script>' % (var, var), page, re.S)
    if not m:
        raise ValueError(f"no `var {var}` block in the report: not a Snakemake 8/9 HTML report?")
    return json.loads(m.group(1))


def report_results(html_path: str | os.PathLike) -> tuple[dict, dict]:
    """(results, categories) as embedded in a Snakemake HTML report."""
    page = Path(html_path).read_text(encoding="utf-8")
    return _script_json(page, "results"), _script_json(page, "categories")


def decode_data_uri(uri: str) -> bytes:
    if not uri.startswith("data:"):
        raise ValueError("not a data URI (a .zip report keeps results as files: open its report.html "
                         "from the unpacked folder)")
    head, _, data = uri.partition(",")
    return base64.b64decode(data) if head.endswith(";base64") else data.encode()


def png_size(data: bytes) -> tuple[int, int]:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return struct.unpack(">II", data[16:24])


def png_is_blank(data: bytes) -> bool:
    """True if every pixel of the PNG has the same colour (a blank page or figure)."""
    import io

    import matplotlib.image as mpimg
    import numpy as np

    pixels = mpimg.imread(io.BytesIO(data), format="png")
    return bool(np.ptp(pixels.reshape(-1, pixels.shape[-1]) if pixels.ndim == 3 else pixels, axis=0).max() == 0)


def _match(expected: str, path: str, entry: dict) -> bool:
    labels = [str(v) for v in (entry.get("labels") or {}).values()]
    return expected in (entry.get("name"), entry.get("filename"), *labels) or path.endswith("/" + expected) \
        or path == expected or any(lab.startswith(expected + " ") for lab in labels)


def _static_problems(results: dict, expected: Iterable[str]) -> list[str]:
    problems = []
    for name in expected:
        hits = [p for p, e in results.items() if _match(name, p, e)]
        if not hits:
            problems.append(f"{name}: not in the report")
    for path, e in results.items():
        try:
            data = decode_data_uri(e["data_uri"])
        except ValueError as err:
            problems.append(f"{path}: {err}")
            continue
        if not data:
            problems.append(f"{path}: empty file")
            continue
        if not re.sub(r"<[^>]+>", "", e.get("caption") or "").strip():
            problems.append(f"{path}: no caption")
        mime = e.get("mime_type")
        if mime == "image/png":
            try:
                w, h = png_size(data)
            except ValueError:
                problems.append(f"{path}: image/png that is not a PNG")
                continue
            if w < 50 or h < 50:
                problems.append(f"{path}: PNG only {w}x{h}")
        elif mime == "text/html":
            cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", data.decode(), re.S)]
            if not any(cells):
                problems.append(f"{path}: HTML without a filled table cell")
        elif mime in ("text/csv", "text/tab-separated-values"):
            if len(data.decode().strip().splitlines()) < 2:
                problems.append(f"{path}: table without data rows")
    return problems


_HARNESS = r"""
<script>
(async function selfknowReportCheck() {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const out = { app: false, done: false, categories: Object.keys(categories), results: {} };
  // progress is written into the DOM as it goes, so a dump taken early shows how far it got
  const pre = document.createElement("pre");
  pre.id = "__MARK__";
  pre.style.display = "none";
  document.body.appendChild(pre);
  const publish = () => { pre.textContent = JSON.stringify(out); };
  publish();
  for (let i = 0; i < 200 && typeof app === "undefined"; i++) await sleep(50);
  out.app = typeof app !== "undefined";
  const text = (h) => { const d = document.createElement("div"); d.innerHTML = h; return d.textContent.replace(/\s+/g, " ").trim(); };
  if (out.app) {
    for (const [path, entry] of Object.entries(results)) {
      const rec = { name: entry.name, mime: entry.mime_type };
      try {
        app.showResultInfo(path);
        await sleep(150);
        const page = document.body.innerText.replace(/\s+/g, " ");
        const cap = text(entry.caption || "").slice(0, 40);
        rec.caption_shown = cap.length > 0 && page.includes(cap);
        const label = Object.values(entry.labels || {})[0];
        rec.name_shown = page.includes(label !== undefined ? String(label) : path);
        if (entry.mime_type.startsWith("image/")) {
          app.setView({ content: "img", contentPath: entry.data_uri, resultPath: path });
          await sleep(150);
          const img = Array.from(document.querySelectorAll("img")).find((i) => i.src === entry.data_uri);
          rec.view = !!img;
          if (img) {
            // poll rather than await img.decode(): virtual time does not wait for a decode
            // promise (the budget would run out), but it does wait for the image's load
            for (let i = 0; i < 100 && !(img.complete && img.naturalWidth > 0); i++) await sleep(50);
            rec.width = img.naturalWidth; rec.height = img.naturalHeight;
            const c = document.createElement("canvas");
            c.width = 64; c.height = 64;
            const ctx = c.getContext("2d");
            ctx.drawImage(img, 0, 0, 64, 64);
            const px = ctx.getImageData(0, 0, 64, 64).data;
            const colours = new Set();
            for (let k = 0; k < px.length; k += 4) colours.add(px[k] + "," + px[k + 1] + "," + px[k + 2]);
            rec.colours = colours.size;
          }
        } else if (entry.mime_type === "text/html") {
          app.setView({ content: "html", contentPath: entry.data_uri, resultPath: path });
          await sleep(150);
          const shown = Array.from(document.querySelectorAll("iframe")).find((f) => f.src === entry.data_uri);
          rec.view = !!shown;
          // the app's data: iframe is cross-origin; render the same page in a same-origin one
          // of the same width (the window's, --window-size)
          const b64 = entry.data_uri.split(",")[1];
          const bytes = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
          const f = document.createElement("iframe");
          const w = shown ? Math.round(shown.getBoundingClientRect().width) : 0;
          rec.frame_width = w > 0 ? w : 800;
          f.style.width = rec.frame_width + "px"; f.style.height = "600px";
          const loaded = new Promise((r) => (f.onload = r));
          f.srcdoc = new TextDecoder("utf-8").decode(bytes);
          document.body.appendChild(f);
          await Promise.race([loaded, sleep(5000)]);
          const d = f.contentDocument;
          const cells = Array.from(d.querySelectorAll("td")).filter((td) => td.textContent.trim().length > 0);
          const table = d.querySelector("table");
          rec.rows = d.querySelectorAll("tbody tr").length;
          rec.filled_cells = cells.length;
          rec.table_height = table ? table.getBoundingClientRect().height : 0;
          // wider than its frame: the part right of the frame is cut off unless it scrolls in a box
          rec.page_width = d.documentElement.scrollWidth;
          rec.view_width = d.documentElement.clientWidth;
          f.remove();
        } else {
          rec.view = null;
        }
      } catch (e) {
        rec.error = String(e);
      }
      out.results[path] = rec;
      publish();
    }
    // leave the report on its first result, for the screenshot
    const first = Object.keys(results)[0];
    if (first) {
      const e0 = results[first];
      app.showResultInfo(first);
      if (e0.mime_type.startsWith("image/")) app.setView({ content: "img", contentPath: e0.data_uri, resultPath: first });
      else if (e0.mime_type === "text/html") app.setView({ content: "html", contentPath: e0.data_uri, resultPath: first });
    }
  }
  out.done = true;
  publish();
})();
</script>
""".replace("__MARK__", RESULT_MARK)


def _run_chromium(chromium: str, args: list[str], profile: Path, timeout: float) -> subprocess.CompletedProcess:
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def browser_check(html_path: str | os.PathLike, *, chromium: str | None = None, screenshot: str | os.PathLike | None = None,
                  window_size: str = "1400,1000", budget_ms: int = 60000, timeout: float = 180) -> tuple[dict | None, list[str]]:
    """Drive the report in headless Chromium; returns (what the harness saw, problems)."""
    chromium = chromium or find_chromium()
    if chromium is None:
        return None, ["chromium not found (Debian: apt-get install chromium)"]
    page = Path(html_path).read_text(encoding="utf-8")
    if "</body>" not in page:
        return None, [f"{html_path}: no </body>"]
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="report-check-") as tmp:
        tmp = Path(tmp)
        harness = tmp / "report.html"
        i = page.rindex("</body>")
        harness.write_text(page[:i] + _HARNESS + page[i:], encoding="utf-8")
        url = harness.as_uri()
        proc = _run_chromium(chromium, [f"--virtual-time-budget={budget_ms}", f"--window-size={window_size}",
                                        "--dump-dom", url], tmp / "profile-dom", timeout)
        m = re.search(r'<pre id="%s"[^>]*>(.*?)</pre>' % RESULT_MARK, proc.stdout, re.S)
        if not m:
            return None, [f"chromium --dump-dom gave no harness output (exit {proc.returncode}): "
                          f"{proc.stderr.strip()[-800:]}"]
        seen = json.loads(html_lib.unescape(m.group(1)))
        if screenshot is not None:
            shot = Path(screenshot)
            shot.parent.mkdir(parents=True, exist_ok=True)
            proc = _run_chromium(chromium, [f"--virtual-time-budget={budget_ms}", f"--screenshot={shot}",
                                            f"--window-size={window_size}", url], tmp / "profile-shot", timeout)
            if not shot.is_file() or shot.stat().st_size == 0:
                problems.append(f"no screenshot written (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
            elif png_is_blank(shot.read_bytes()):
                problems.append(f"screenshot {shot} is blank")
    if not seen.get("app"):
        problems.append("the report app never started (no global `app`)")
    elif not seen.get("done"):
        problems.append(f"the browser harness stopped after {len(seen.get('results', {}))} of the results "
                        f"(virtual time budget {budget_ms} ms used up?)")
    for path, rec in seen.get("results", {}).items():
        if rec.get("error"):
            problems.append(f"{path}: {rec['error']}")
        if not rec.get("name_shown"):
            problems.append(f"{path}: its name/label is not shown on the result page")
        if not rec.get("caption_shown"):
            problems.append(f"{path}: its caption is not shown")
        if rec["mime"].startswith("image/"):
            if not rec.get("view"):
                problems.append(f"{path}: the app does not show the image")
            elif not (rec.get("width", 0) > 0 and rec.get("height", 0) > 0):
                problems.append(f"{path}: image did not decode in the browser")
            elif rec.get("colours", 0) < 2:
                problems.append(f"{path}: image is blank")
        elif rec["mime"] == "text/html":
            if not rec.get("view"):
                problems.append(f"{path}: the app does not show the table page")
            if not (rec.get("filled_cells", 0) > 0 and rec.get("table_height", 0) > 0):
                problems.append(f"{path}: the table renders empty")
            if rec.get("page_width", 0) > rec.get("view_width", 0):
                problems.append(f"{path}: the table page is {rec['page_width']} px wide in a "
                                f"{rec['view_width']} px view: cut off at the right")
    return seen, problems


def catalog_labels(keys: Iterable[str] | None = None) -> list[str]:
    """The result labels the report should show for the catalog entries `keys` (all when None;
    `selfknow.catalogs.REPORT`); labels with wildcards (one result per model/dataset)
    are matched by their fixed prefix."""
    from selfknow.catalogs import REPORT as items

    chosen = items if keys is None else {k: items[k] for k in keys}
    return [it["label"].split("{")[0].strip() if "{" in it["label"] else it["label"] for it in chosen.values()]


def check_report(html_path: str | os.PathLike, expected_names: Iterable[str], *, chromium: str | None = None,
                 screenshot: str | os.PathLike | None = None, budget_ms: int = 60000) -> list[str]:
    """Problems with the report at `html_path` (see the module note); [] when every expected
    table and figure is present, non-empty, captioned and renders in Chromium."""
    expected = list(expected_names)
    results, _ = report_results(html_path)
    problems = _static_problems(results, expected)
    seen, browser_problems = browser_check(html_path, chromium=chromium, screenshot=screenshot, budget_ms=budget_ms)
    problems += browser_problems
    if seen is not None:
        missing = set(results) - set(seen.get("results", {}))
        problems += [f"{p}: not visited by the browser harness" for p in sorted(missing)]
    return problems


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Check a Snakemake HTML report in headless Chromium.")
    ap.add_argument("report")
    ap.add_argument("names", nargs="*", help="results that must be present (file name, path or label)")
    ap.add_argument("--catalog", action="store_true", help="also expect every label of the report catalog ...")
    ap.add_argument("--keys", nargs="*", help="... or only of these catalog keys (e.g. lcae/table1)")
    ap.add_argument("--screenshot", help="write a screenshot of the report here")
    a = ap.parse_args(argv)
    names = list(a.names) + (catalog_labels(a.keys) if a.catalog else [])
    found = check_report(a.report, names, screenshot=a.screenshot)
    print("\n".join(found) or f"report OK: {len(names)} expected results present, every result renders")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
