"""Dashboard (controller/static/) in headless Chromium against the fake API (tests/fakeapi.py).

The `check_*` helpers take a WebDriver and a base URL only, so they can be pointed at the real
controller too: `open_dashboard(driver, "http://127.0.0.1:8080")` then `check_fabric_drawn(...)`.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import WebDriver, make_driver, missing
from tests.conftest import require
from tests.fakeapi import FakeApi, FakeFabric
from tests.waiting import wait_for

try:
    from selenium.webdriver.common.by import By
except ImportError:  # selenium missing: the tests skip (and fail under CI=true)
    pass

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
HHMMSS = re.compile(r"\b\d{2}:\d{2}:\d{2}\b")


# ---------- reusable helpers (base URL + driver) ----------
def fetch_json(base_url: str, path: str) -> dict[str, Any]:
    """GET one API document."""
    with urllib.request.urlopen(base_url.rstrip("/") + path, timeout=5) as resp:
        return json.load(resp)


def open_dashboard(driver: WebDriver, base_url: str, timeout: float = 10) -> None:
    """Load the page and wait until the fabric graph and the first live data are there."""
    driver.get(base_url.rstrip("/") + "/")
    wait_for(
        lambda: driver.execute_script(
            "return document.querySelectorAll('#fabric [data-kind=switch]').length > 0"
            " && document.getElementById('updated').dataset.t !== ''"
        ),
        timeout,
        "fabric drawn and data loaded",
    )


def save_screenshot(driver: WebDriver, name: str) -> Path:
    """Full-window PNG under tests/artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), f"screenshot {path} not written"
    return path


def js_errors(driver: WebDriver) -> list[str]:
    """SEVERE browser console entries other than failed resource loads."""
    return [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]
    ]


def check_fabric_drawn(
    driver: WebDriver,
    base_url: str,
    spines: int | None = None,
    leaves: int | None = None,
    hosts_per_leaf: int | None = None,
) -> None:
    """Switch/host/link elements match /api/topology (and S×L×H if given); the PS is marked."""
    topo = fetch_json(base_url, "/api/topology")
    if spines is not None:
        assert sum(s["role"] == "spine" for s in topo["switches"]) == spines
    if leaves is not None:
        assert sum(s["role"] == "leaf" for s in topo["switches"]) == leaves
    if hosts_per_leaf is not None and leaves is not None:
        assert len(topo["hosts"]) == leaves * hosts_per_leaf
    names = driver.execute_script("""
        const out = {};
        for (const k of ['switch', 'host', 'link']) {
          out[k] = [...document.querySelectorAll(`#fabric [data-kind=${k}]`)]
            .map(e => e.getAttribute(k === 'link' ? 'data-link' : 'data-name'));
        }
        return out;""")
    assert sorted(names["switch"]) == sorted(s["name"] for s in topo["switches"])
    assert sorted(names["host"]) == sorted(h["name"] for h in topo["hosts"])
    assert len(names["link"]) == len(topo["links"]) == len(set(names["link"]))
    hosts = {h["name"] for h in topo["hosts"]}
    for link in topo["links"]:
        a, ap, b, bp = link["a"], link["a_port"], link["b"], link["b_port"]
        if a in hosts:
            a, ap, b, bp = b, bp, a, ap
        want = f"{a}:{ap}-{b}" if b in hosts else f"{a}:{ap}-{b}:{bp}"
        alt = f"{b}:{bp}-{a}:{ap}"
        assert want in names["link"] or alt in names["link"], f"link {want} not drawn"
    # spines above leaves above hosts
    ys = driver.execute_script("""
        const y = s => [...document.querySelectorAll(s)].map(e => e.getBoundingClientRect().top);
        return [y('#fabric [data-role=spine]'), y('#fabric [data-role=leaf]'),
                y('#fabric [data-kind=host]')];""")
    assert max(ys[0]) < min(ys[1]) and max(ys[1]) < min(ys[2]), "rows not spine/leaf/host top to bottom"
    # the PS host is marked, in a colour of its own
    ps = driver.find_element(By.CSS_SELECTOR, f'#fabric [data-kind=host][data-name="{topo["ps_host"]}"]')
    assert ps.get_attribute("data-ps") == "true"
    assert "PS" in ps.text
    others = driver.find_elements(By.CSS_SELECTOR, "#fabric [data-kind=host][data-ps=false]")
    assert len(others) == len(topo["hosts"]) - 1
    fill = "return getComputedStyle(arguments[0].querySelector('circle')).fill"
    assert {driver.execute_script(fill, o) for o in others} != {driver.execute_script(fill, ps)}
    pp = topo["ps_port"]
    assert driver.find_element(By.ID, "ps-port").text == f"{pp['switch']}-eth{pp['port']}"


def check_layout(driver: WebDriver, min_label_px: float = 8.0) -> None:
    """No two nodes overlap, all nodes inside the SVG, the SVG inside the page, labels readable."""
    geo = driver.execute_script("""
        const r = e => { const b = e.getBoundingClientRect();
                         return {l: b.left, t: b.top, r: b.right, b: b.bottom}; };
        const svg = document.getElementById('fabric');
        return {
          svg: r(svg), box: r(svg.parentElement),
          page: {w: document.documentElement.clientWidth, sw: document.documentElement.scrollWidth},
          nodes: [...svg.querySelectorAll('[data-kind=switch],[data-kind=host]')]
                   .map(e => ({name: e.dataset.name, ...r(e)})),
          labels: [...svg.querySelectorAll('[data-kind=host] .host-label')]
                   .map(e => e.getBoundingClientRect().height),
        };""")
    nodes, svg, eps = geo["nodes"], geo["svg"], 0.5
    assert nodes, "no nodes drawn"
    for n in nodes:
        assert n["r"] > n["l"] and n["b"] > n["t"], f"{n['name']} has an empty box"
        assert (
            n["l"] >= svg["l"] - eps
            and n["r"] <= svg["r"] + eps
            and n["t"] >= svg["t"] - eps
            and n["b"] <= svg["b"] + eps
        ), f"{n['name']} outside the SVG"
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            overlap = (
                a["l"] < b["r"] - eps
                and b["l"] < a["r"] - eps
                and a["t"] < b["b"] - eps
                and b["t"] < a["b"] - eps
            )
            assert not overlap, f"{a['name']} overlaps {b['name']}: {a} {b}"
    box = geo["box"]
    assert svg["l"] >= box["l"] - eps and svg["r"] <= box["r"] + eps, "SVG overflows its container"
    assert geo["page"]["sw"] <= geo["page"]["w"], "page scrolls horizontally"
    assert min(geo["labels"]) >= min_label_px, f"host labels too small: {min(geo['labels']):.1f} px"


def check_live_value_changes(driver: WebDriver, timeout: float = 8) -> None:
    """#ps-rate and #updated change while the counters advance; charts and tables fill."""
    first_rate = driver.find_element(By.ID, "ps-rate").text
    first_t = float(driver.find_element(By.ID, "updated").get_attribute("data-t"))
    assert re.fullmatch(r"\d+\.\d\d", first_rate), f"ps-rate is {first_rate!r}"
    wait_for(lambda: driver.find_element(By.ID, "ps-rate").text != first_rate, timeout, "#ps-rate to change")
    wait_for(
        lambda: float(driver.find_element(By.ID, "updated").get_attribute("data-t")) > first_t,
        timeout,
        "#updated data-t to advance",
    )
    assert HHMMSS.fullmatch(driver.find_element(By.ID, "updated").text)
    wait_for(
        lambda: int(driver.find_element(By.ID, "chart-rate").get_attribute("data-points")) >= 2,
        timeout,
        "throughput chart points",
    )
    assert driver.find_elements(By.CSS_SELECTOR, "#chart-rate path.series.tx")
    assert int(driver.find_element(By.ID, "chart-drops").get_attribute("data-points")) >= 1


def check_tables(driver: WebDriver, base_url: str) -> None:
    """One table row per port of /api/ports and per queue of /api/queues; the PS port first."""
    ports = fetch_json(base_url, "/api/ports")["ports"]
    queues = fetch_json(base_url, "/api/queues")["queues"]
    topo = fetch_json(base_url, "/api/topology")
    rows = driver.find_elements(By.CSS_SELECTOR, "#ports-table tbody tr")
    assert len(rows) == len([p for p in ports if p["port"] < 0xFFFFFF00])
    assert len(driver.find_elements(By.CSS_SELECTOR, "#queues-table tbody tr")) == len(queues)
    pp = topo["ps_port"]
    assert rows[0].get_attribute("data-port") == f"{pp['switch']}:{pp['port']}"
    rate = rows[0].find_element(By.CSS_SELECTOR, ".c-tx").text
    assert re.fullmatch(r"\d+\.\d\d", rate), rate


def ps_port_key(base_url: str) -> str:
    """ "lf1:3" of the PS port."""
    pp = fetch_json(base_url, "/api/topology")["ps_port"]
    return f"{pp['switch']}:{pp['port']}"


def check_ps_port_dropping(
    driver: WebDriver, base_url: str, dropping: bool = True, timeout: float = 8
) -> None:
    """The PS port marker, its link and its table row show data-dropping=<dropping>."""
    key = ps_port_key(base_url)
    want = str(dropping).lower()
    sel = (f'#fabric [data-kind=port][data-port="{key}"]', f'#ports-table tr[data-port="{key}"]')

    def marked() -> bool:
        return all(
            driver.find_element(By.CSS_SELECTOR, s).get_attribute("data-dropping") == want for s in sel
        )

    wait_for(marked, timeout, f"PS port {key} data-dropping={want}")
    sw, port = key.split(":")
    links = driver.execute_script(
        "return [...document.querySelectorAll('#fabric [data-kind=link]')]"
        ".filter(l => (l.dataset.a === arguments[0] && l.dataset.aPort === arguments[1])"
        " || (l.dataset.b === arguments[0] && l.dataset.bPort === arguments[1]))"
        ".map(l => l.dataset.dropping)",
        sw,
        port,
    )
    assert links == [want], f"PS link dropping flags: {links}"
    if dropping:
        ring = driver.find_element(By.CSS_SELECTOR, f'#fabric [data-port="{key}"] .ring')
        assert driver.execute_script("return getComputedStyle(arguments[0]).stroke", ring) != "none"
        assert float(driver.find_element(By.ID, "ps-drops").get_attribute("data-value")) > 0
    else:
        others = driver.find_elements(By.CSS_SELECTOR, "#fabric [data-kind=port][data-dropping=true]")
        assert not others, f"ports marked dropping: {[o.get_attribute('data-port') for o in others]}"


def check_stale_banner(driver: WebDriver, visible: bool = True, timeout: float = 8) -> None:
    """#stale is shown (with 'stale data' and HH:MM:SS) or hidden."""
    wait_for(
        lambda: driver.find_element(By.ID, "stale").is_displayed() == visible,
        timeout,
        f"#stale displayed={visible}",
    )
    if visible:
        text = driver.find_element(By.ID, "stale").text
        assert "stale data" in text and "controller not answering since" in text, text
        assert HHMMSS.search(text), text


def check_phase_shown(
    driver: WebDriver, strategy: str, step: int, steps: int, state: str, timeout: float = 5
) -> None:
    """#phase shows strategy, step/steps and state of /api/phase."""

    def shown() -> bool:
        el = driver.find_element(By.ID, "phase")
        return (
            el.get_attribute("data-state") == state
            and driver.find_element(By.ID, "phase-strategy").text == strategy
            and driver.find_element(By.ID, "phase-step").text == f"{step}/{steps}"
            and driver.find_element(By.ID, "phase-state").text == state
        )

    wait_for(shown, timeout, f"phase {strategy} {step}/{steps} {state}")


# ---------- fixtures ----------
@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    """One headless Chromium for the module; skips when the browser stack is missing."""
    require(missing())
    drv = make_driver()
    yield drv
    drv.quit()


@pytest.fixture
def fake_factory() -> Iterator[Callable[..., FakeApi]]:
    """Start fake APIs for a test; all stopped afterwards."""
    started: list[FakeApi] = []

    def start(spines: int = 2, leaves: int = 4, hosts_per_leaf: int = 2) -> FakeApi:
        api = FakeApi(FakeFabric(spines, leaves, hosts_per_leaf)).start()
        started.append(api)
        return api

    yield start
    for api in started:
        api.stop()


# ---------- tests against the fake API ----------
def test_default_fabric_drawn(driver: WebDriver, fake_factory: Callable[..., FakeApi]) -> None:
    """2×4×2: elements match the topology, layout clean, no JS errors."""
    api = fake_factory(2, 4, 2)
    driver.set_window_size(1400, 1000)
    open_dashboard(driver, api.url)
    check_fabric_drawn(driver, api.url, 2, 4, 2)
    check_layout(driver)
    check_tables(driver, api.url)
    assert driver.find_element(By.ID, "stale").is_displayed() is False
    save_screenshot(driver, "dashboard-2x4x2.png")
    assert js_errors(driver) == []


@pytest.mark.parametrize("size", [(1400, 1000), (1024, 768)])
def test_large_fabric_layout(
    driver: WebDriver, fake_factory: Callable[..., FakeApi], size: tuple[int, int]
) -> None:
    """4×8×4 (32 hosts): no overlaps, nothing outside the SVG or page, labels readable."""
    api = fake_factory(4, 8, 4)
    driver.set_window_size(*size)
    open_dashboard(driver, api.url)
    check_fabric_drawn(driver, api.url, 4, 8, 4)
    check_layout(driver)
    save_screenshot(driver, f"dashboard-4x8x4-{size[0]}.png")
    assert js_errors(driver) == []


def test_live_values_advance(driver: WebDriver, fake_factory: Callable[..., FakeApi]) -> None:
    """The PS rate and the clock change as the fake's counters advance."""
    api = fake_factory()
    driver.set_window_size(1400, 1000)
    open_dashboard(driver, api.url)
    check_live_value_changes(driver)
    utils = driver.execute_script(
        "return [...document.querySelectorAll('#fabric [data-kind=link]')].map(l => l.dataset.util)"
    )
    assert all(u != "" and 0 <= float(u) <= 1 for u in utils), utils
    assert (
        len(
            {
                driver.execute_script("return arguments[0].getAttribute('stroke')", link)
                for link in driver.find_elements(By.CSS_SELECTOR, "#fabric [data-kind=link]")
            }
        )
        > 1
    )


def test_ps_port_marked_dropping(driver: WebDriver, fake_factory: Callable[..., FakeApi]) -> None:
    """Drops on the PS port mark it (graph + table); the mark goes when drops stop."""
    api = fake_factory()
    driver.set_window_size(1400, 1000)
    open_dashboard(driver, api.url)
    check_ps_port_dropping(driver, api.url, dropping=False)
    api.fabric.ps_dropping = True
    check_ps_port_dropping(driver, api.url, dropping=True)
    wait_for(
        lambda: driver.execute_script(
            "return document.querySelector('#chart-drops path.series.drops') !== null"
            " && document.getElementById('chart-drops').dataset.ymax > 1"
        ),
        8,
        "drops in the drops chart",
    )
    save_screenshot(driver, "dashboard-dropping.png")
    api.fabric.ps_dropping = False
    check_ps_port_dropping(driver, api.url, dropping=False)


def test_stale_banner_when_down_and_recovery(driver: WebDriver, fake_factory: Callable[..., FakeApi]) -> None:
    """Connections closed without answer -> banner; answers again -> banner gone, data moves."""
    api = fake_factory()
    driver.set_window_size(1400, 1000)
    open_dashboard(driver, api.url)
    check_stale_banner(driver, visible=False, timeout=1)
    api.set_mode("down")
    before = float(driver.find_element(By.ID, "updated").get_attribute("data-t"))
    check_stale_banner(driver, visible=True)
    save_screenshot(driver, "dashboard-stale.png")
    api.set_mode("ok")
    check_stale_banner(driver, visible=False)
    assert float(driver.find_element(By.ID, "updated").get_attribute("data-t")) > before


def test_stale_banner_when_timestamp_frozen(driver: WebDriver, fake_factory: Callable[..., FakeApi]) -> None:
    """Answers whose t stops advancing for > 3 s -> banner (not before ~3 s)."""
    api = fake_factory()
    driver.set_window_size(1400, 1000)
    open_dashboard(driver, api.url)
    api.set_mode("frozen")
    frozen_at = time.monotonic()
    check_stale_banner(driver, visible=True, timeout=8)
    assert time.monotonic() - frozen_at > 2.0, "banner shown before the data was 3 s old"
    api.set_mode("error")
    wait_for(
        lambda: "HTTP 500" in driver.find_element(By.ID, "stale-reason").get_attribute("textContent"),
        8,
        "the page to get the API's HTTP 500",
    )
    check_stale_banner(driver, visible=True, timeout=1)
    api.set_mode("ok")
    check_stale_banner(driver, visible=False)


def test_phase_shown(driver: WebDriver, fake_factory: Callable[..., FakeApi]) -> None:
    """Strategy, step/steps and state of /api/phase appear and follow changes."""
    api = fake_factory()
    driver.set_window_size(1400, 1000)
    api.fabric.phase = {"strategy": "ps", "step": 3, "steps": 10, "state": "running"}
    open_dashboard(driver, api.url)
    check_phase_shown(driver, "ps", 3, 10, "running")
    api.fabric.phase = {"strategy": "ring", "step": 10, "steps": 10, "state": "done"}
    check_phase_shown(driver, "ring", 10, 10, "done")
