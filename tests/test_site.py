"""The built site, tested like a reader: headless Chromium on a loopback server.

Every page of the table of contents renders its title and its math with no JavaScript error and
loads nothing from outside the site; every figure loads; no internal link is broken; each
chapter's Colab button opens its notebook in the configured repository; search finds "KV cache".
Screenshots of the landing page and of a chapter go to test-output/ for review.

Needs Chromium and its driver (Debian/Ubuntu: `apt-get install chromium chromium-driver`;
.ci/run installs them), or CHROME_BINARY and CHROMEDRIVER naming a Chrome and its driver.
Without them the test is skipped, except under CI (the CI variable set), where it fails.
Set COURSE_SITE_HTML=_build/html to test a site already built by `make book`.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from course_toc import chapters_with_notebooks, expected_colab_url, source_title, toc_pages

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "test-output"
INSTALL_HINT = (
    "Chromium is not installed, so the browser test of the site is skipped. Install it with "
    "`sudo apt-get install chromium chromium-driver` (Debian/Ubuntu), or set CHROME_BINARY and "
    "CHROMEDRIVER to a Chrome and its matching chromedriver."
)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)


def find_executable(env_var: str, candidates: tuple[str, ...]) -> str | None:
    if os.environ.get(env_var):
        return os.environ[env_var]
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def browser_paths() -> tuple[str, str]:
    chrome = find_executable("CHROME_BINARY", ("chromium", "chromium-browser", "google-chrome"))
    driver = find_executable("CHROMEDRIVER", ("chromedriver",))
    if not chrome or not driver:
        if os.environ.get("CI"):  # CI installs Chromium (.ci/run), so there it must run
            pytest.fail(INSTALL_HINT)
        pytest.skip(INSTALL_HINT)
    pytest.importorskip("selenium", reason="selenium is missing: pip install -e '.[dev]'")
    return chrome, driver


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def base_url(browser_paths: tuple[str, str], site_html: Path) -> Iterator[str]:
    """The site served on 127.0.0.1 at a free port, e.g. 'http://127.0.0.1:40123/'."""
    handler = functools.partial(QuietHandler, directory=str(site_html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(browser_paths: tuple[str, str], tmp_path_factory: pytest.TempPathFactory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, driver_path = browser_paths
    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(20)
    yield driver
    driver.quit()


# Runs in the page once it has loaded: waits for MathJax and for every image, then reports.
INSPECT_PAGE = """
const done = arguments[arguments.length - 1];
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const images = [...document.images];
  images.forEach(img => { img.loading = 'eager'; });
  await Promise.all(images.map(img => img.decode().catch(() => null)));
  // The article's title (the theme also has a print-only <h1> in the header).
  const h1 = document.querySelector('article.bd-article h1') || document.querySelector('article h1');
  let title = null, titleVisible = false;
  if (h1) {
    const copy = h1.cloneNode(true);
    copy.querySelectorAll('.headerlink').forEach(a => a.remove());
    title = copy.textContent.trim();
    titleVisible = h1.getBoundingClientRect().height > 0;
  }
  done({
    title: title,
    titleVisible: titleVisible,
    untypesetMath: [...document.querySelectorAll('main .math')]
      .filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 60)),
    brokenImages: images.filter(img => !(img.complete && img.naturalWidth > 0))
      .map(img => img.currentSrc || img.src),
    imageCount: images.length,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    assets: [
      ...[...document.querySelectorAll('script[src]')].map(s => s.src),
      ...[...document.querySelectorAll('link[href]')].map(l => l.href),
      ...performance.getEntriesByType('resource').map(e => e.name),
    ],
    colab: [...document.querySelectorAll('.launch-box a.launch-colab')].map(a => a.href),
  });
})();
"""


@dataclass
class Page:
    docname: str
    url: str
    title: str | None = None
    title_visible: bool = False
    untypeset_math: list[str] = field(default_factory=list)
    broken_images: list[str] = field(default_factory=list)
    image_count: int = 0
    links: list[str] = field(default_factory=list)
    assets: list[str] = field(default_factory=list)
    colab: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def visit(browser, base_url: str, docname: str, path: str) -> Page:
    """Open one page and record what a reader would see."""
    page = Page(docname=docname, url=urllib.parse.urljoin(base_url, path))
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(page.url)
    report = browser.execute_async_script(INSPECT_PAGE)
    page.title = report["title"]
    page.title_visible = report["titleVisible"]
    page.untypeset_math = report["untypesetMath"]
    page.broken_images = report["brokenImages"]
    page.image_count = report["imageCount"]
    page.links = report["links"]
    page.assets = report["assets"]
    page.colab = report["colab"]
    page.errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    return page


@pytest.fixture(scope="module")
def pages(browser, base_url: str) -> dict[str, Page]:
    """Every toc page, visited once; screenshots of the landing page and of a chapter."""
    SCREENSHOTS.mkdir(exist_ok=True)
    visited: dict[str, Page] = {}
    docnames = toc_pages()
    shots = {docnames[0]: "site-landing.png"}
    shots.update({chapter: "site-chapter.png" for chapter in list(chapters_with_notebooks())[:1]})
    for docname in docnames:
        visited[docname] = visit(browser, base_url, docname, f"{docname}.html")
        if docname in shots:
            browser.save_screenshot(str(SCREENSHOTS / shots[docname]))
    return visited


def test_site_root_opens_the_landing_page(browser, base_url: str) -> None:
    browser.get(base_url)
    landing = toc_pages()[0]
    assert browser.current_url.endswith(f"{landing}.html"), browser.current_url
    assert "Prefill" in browser.title


def test_every_toc_page_renders_its_title(pages: dict[str, Page]) -> None:
    wrong = {
        d: (p.title, source_title(d)) for d, p in pages.items() if not p.title_visible or p.title != source_title(d)
    }
    assert not wrong, f"pages whose shown title differs from their source (shown, source): {wrong}"


def test_no_javascript_errors(pages: dict[str, Page]) -> None:
    errors = {d: p.errors for d, p in pages.items() if p.errors}
    assert not errors, f"the browser console reported errors: {errors}"


def test_math_is_typeset(pages: dict[str, Page]) -> None:
    raw = {d: p.untypeset_math for d, p in pages.items() if p.untypeset_math}
    assert not raw, f"math left as TeX source (MathJax missing?): {raw}"


def test_pages_load_nothing_from_outside_the_site(pages: dict[str, Page], base_url: str) -> None:
    external = {
        d: sorted({a for a in p.assets if not a.startswith(base_url) and not a.startswith("data:")})
        for d, p in pages.items()
    }
    external = {d: a for d, a in external.items() if a}
    assert not external, f"pages fetch scripts, styles or files from outside the site: {external}"


def test_every_image_loads(pages: dict[str, Page]) -> None:
    broken = {d: p.broken_images for d, p in pages.items() if p.broken_images}
    assert not broken, f"images that did not load: {broken}"
    assert all(p.image_count > 0 for p in pages.values()), "every page shows at least the logo"


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read()
            kind = response.headers.get_content_type()
            return response.status, body.decode("utf-8", "replace") if kind == "text/html" else ""
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_no_internal_link_is_broken(pages: dict[str, Page], base_url: str) -> None:
    """Every link to the site answers 200, and every #anchor exists on its target page."""
    targets: dict[str, set[str]] = {}
    for page in pages.values():
        for link in page.links:
            if link.startswith(base_url):
                url, _, fragment = link.partition("#")
                targets.setdefault(url, set()).add(fragment)
    assert len(targets) > len(pages), "found suspiciously few internal links"
    broken, missing_anchors = [], []
    for url, fragments in sorted(targets.items()):
        status, body = fetch(url)
        if status != 200:
            broken.append(f"{url} ({status})")
            continue
        if not body:
            continue
        ids = set(re.findall(r'\b(?:id|name)="([^"]+)"', body))
        for fragment in sorted(fragments - {""}):
            if urllib.parse.unquote(fragment) not in ids:
                missing_anchors.append(f"{url}#{fragment}")
    assert not broken, f"internal links that do not answer 200: {broken}"
    assert not missing_anchors, f"links to anchors missing on their page: {missing_anchors}"


def test_chapter_colab_buttons_open_their_notebook(pages: dict[str, Page]) -> None:
    chapters = chapters_with_notebooks()
    assert chapters, "no chapter page has a notebook in _toc.yml"
    for docname, notebooks in chapters.items():
        assert pages[docname].colab == [expected_colab_url(nb) for nb in notebooks], docname
        for notebook in notebooks:
            assert (ROOT / notebook).is_file()
            lab = pages[notebook.removesuffix(".ipynb")]
            assert lab.colab == [expected_colab_url(notebook)], notebook


def test_search_finds_kv_cache(browser, base_url: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser")
    browser.get(urllib.parse.urljoin(base_url, "search.html?q=KV+cache"))
    results = WebDriverWait(browser, 20).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "#search-results ul.search li a")
    )
    hrefs = [a.get_attribute("href") for a in results]
    assert any("04-kv-cache" in h for h in hrefs), f"'KV cache' did not find chapter 4: {hrefs}"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
