"""`evalbench view` in a real headless Chromium (the system binary, driven over its DevTools pipe): a
10,000-case run's page renders its first page of cases with hostile transcripts as text and no console
message; the label buttons write through the token; a page of another origin cannot write.
(How long the page takes is measured by tests/perf/view_page.py, not asserted here.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium_pipe import CHROMIUM, Chromium
from helpers import write_benchmark
from view_helpers import HOSTILE, Served, case, new_store, run_of, serve

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")

CASES = 10_000
WAIT_FOR_LABEL = """(async () => {
  const out = document.querySelector('form.label .label-result');
  for (let i = 0; i < 400 && !/^(labelled|not saved)/.test(out.textContent); i++) await new Promise(r => setTimeout(r, 25));
  return out.textContent;
})()"""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    root = tmp_path_factory.mktemp("view")
    write_benchmark(root)
    store = new_store(root / "runs.sqlite")
    store.record(run_of([case(i, passed=i % 3 != 0, probability=i / CASES, text=HOSTILE) for i in range(CASES)]))
    with serve(store, root) as served:
        yield served, root
    store.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    chromium = Chromium(tmp_path / "profile")
    yield chromium
    chromium.close()


def test_a_10000_case_run_page_renders_in_chromium(big: tuple[Served, Path], browser: Chromium) -> None:
    served, _ = big
    browser.open(served.url + "/runs/1")
    assert browser.evaluate("document.querySelector('[data-testid=case-count]').textContent").startswith(
        f"{CASES} cases · page 1 of {CASES // 50}")
    assert browser.evaluate("document.querySelectorAll('details.case').length") == 50
    assert browser.evaluate("document.querySelector('meta[name=evalbench-token]').content") == served.token
    # the hostile transcript is text: no element it names exists, its characters are shown
    assert browser.evaluate("document.querySelectorAll('script').length") == 1
    assert browser.evaluate("document.querySelectorAll('img, #cases details details').length") == 0
    shown = browser.evaluate("document.querySelector('.turn.user').textContent")
    assert "<script>alert(1)</script><img src=x onerror=alert(2)>" in shown and "\\x1b[31mred" in shown
    assert "\\u202eevil" in shown and "\u202e" not in shown
    assert browser.evaluate("document.querySelector('details.case .flag').textContent").startswith("P(present) 0.50")
    browser.open(served.url + "/")
    browser.open(served.url + "/runs/1?status=failed&page=7&q=traveller")
    assert browser.evaluate("document.querySelectorAll('details.case').length") == 50
    assert browser.console() == []


def test_label_buttons_write_through_the_token(big: tuple[Served, Path], browser: Chromium) -> None:
    served, root = big
    calibration = root / "benchmarks" / "demo" / "calibration.jsonl"
    calibration.unlink(missing_ok=True)
    browser.open(served.url + "/runs/1")
    node = browser.evaluate("document.querySelector('form.label').dataset.case")
    browser.evaluate("document.querySelector('form.label input[name=note]').value = 'no question asked'")
    browser.evaluate("document.querySelector('form.label button[data-present=false]').click()")
    assert browser.evaluate(WAIT_FOR_LABEL) == "labelled: benchmarks/demo/calibration.jsonl line 1"
    [line] = calibration.read_text().splitlines()
    written = json.loads(line)
    number = int(node.split("::s")[1][:5])
    assert written == {"metric_id": "m01", "transcript": case(number, text=HOSTILE).transcript, "present": False,
                       "note": "no question asked"}
    assert browser.console() == []


def test_a_page_of_another_origin_cannot_write(big: tuple[Served, Path], browser: Chromium, tmp_path: Path) -> None:
    """Another page in the same browser (here another local server's, a different origin) posts what a
    cross-site form or fetch can: a form content type, JSON without the token, JSON with a guessed token.
    None of them writes."""
    served, root = big
    calibration = root / "benchmarks" / "demo" / "calibration.jsonl"
    calibration.unlink(missing_ok=True)
    other_store = new_store(tmp_path / "other.sqlite")
    body = json.dumps({"run": 1, "case": case(1).node_id, "metric": "m01", "present": True, "note": ""})
    with serve(other_store, tmp_path) as other:
        browser.send("Page.setBypassCSP", {"enabled": True}, session=True)  # a hostile page sets no CSP of its own
        browser.open(other.url + "/")
        attempts = browser.evaluate(f"""(async () => {{
          const url = {json.dumps(served.url + "/api/labels")}, body = {json.dumps(body)}, out = [];
          for (const headers of [{{"Content-Type": "text/plain"}}, {{"Content-Type": "application/x-www-form-urlencoded"}},
                                 {{"Content-Type": "application/json"}},
                                 {{"Content-Type": "application/json", "X-Evalbench-Token": "guess"}}]) {{
            try {{ const r = await fetch(url, {{method: "POST", headers, body, mode: "no-cors"}}); out.push(r.type); }}
            catch (e) {{ out.push("refused"); }}
            try {{ const r = await fetch(url, {{method: "POST", headers, body}}); out.push(r.status); }}
            catch (e) {{ out.push("refused"); }}
          }}
          return out;
        }})()""")
    other_store.close()
    # no-cors requests reach the server (a no-cors request cannot carry the token header) and are refused
    # there; the page can read no answer of a cors one
    assert attempts == ["opaque", "refused"] * 4
    assert not calibration.exists()
