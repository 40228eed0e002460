"""The web dashboard (/ui) in a real headless Chromium driven by selenium, on the live platform:
log in with an API key, watch a sandbox appear, open it, run a command in its console, and the
refusals (a wrong key, another tenant's sandbox, a forged POST, markup in sandbox output).
Every wait is a WebDriverWait on the DOM; screenshots go to the test's tmp dir."""

import secrets
import shutil

import httpx
import pytest

from corral import Corral
from tests.e2e.conftest import OTHER_TENANT_KEY
from tests.polling import until_sync

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
WAIT_S = 60

pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="needs Debian's chromium and chromium-driver (make deps)")


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    options.add_argument("--headless=new")
    # Only for this TEST browser: Chromium's own sandbox cannot start as root (we run as root
    # here); the dashboard's users run a normal, sandboxed browser.
    options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument("--window-size=1400,1000")
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.shots = tmp_path  # type: ignore[attr-defined]
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, timeout: float = WAIT_S):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def polled(d):
        try:
            return condition(d)
        except WebDriverException as exc:
            # Chromium's word for an element the last re-render replaced, when it comes as an
            # inspector error rather than a stale reference: look again at the next poll.
            if "does not belong to the document" in str(exc):
                return False
            raise

    # The pages re-render their live parts every 2 s: an element found a moment ago may be gone.
    return WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(polled)


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(driver.shots / f"{name}.png"))


def log_in(driver, api: str, key: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{api}/ui")
    wait(driver, lambda d: d.current_url.endswith("/ui/login"))  # no session: sent to the form
    driver.find_element(By.ID, "api_key").send_keys(key)
    driver.find_element(By.ID, "login").click()


def test_wrong_key_is_refused(platform, browser):
    from selenium.webdriver.common.by import By

    log_in(browser, platform["api"], "not-a-key-" + secrets.token_hex(4))
    error = wait(browser, lambda d: d.find_elements(By.ID, "login-error"))
    shot(browser, "wrong-key")
    assert error[0].text == "invalid API key"
    assert browser.current_url.endswith("/ui/login")
    assert browser.get_cookie("corral_ui") is None
    browser.get(f"{platform['api']}/ui/sandboxes")
    wait(browser, lambda d: d.current_url.endswith("/ui/login"))


def test_login_watch_a_sandbox_run_a_command_and_log_out(platform, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions

    api, suite = platform["api"], f"ui-{secrets.token_hex(4)}"
    log_in(browser, api, platform["api_key"])
    wait(browser, lambda d: d.find_elements(By.ID, "by-state"))
    shot(browser, "overview")
    cookie = browser.get_cookie("corral_ui")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script reads it
    assert browser.find_element(By.ID, "nodes").text.count("node-") == 2

    browser.get(f"{api}/ui/sandboxes?label=suite={suite}")
    wait(browser, lambda d: "no sandbox" in d.find_element(By.ID, "sandboxes").text)
    with Corral(api, platform["api_key"]) as corral, \
            Corral(api, OTHER_TENANT_KEY) as other, \
            corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": suite, "note": "<b>bold</b>"}) as sb, \
            other.sandboxes.create("busybox", memory_mb=64, labels={"suite": suite}) as theirs:
        # The page polls: the sandbox shows up running without a reload.
        row = f'tr.sandbox-row[data-id="{sb.id}"] td.state'
        wait(browser, lambda d: [e for e in d.find_elements(By.CSS_SELECTOR, row) if e.text == "running"])
        shot(browser, "sandbox-list")
        table = browser.find_element(By.ID, "sandboxes")
        assert theirs.id not in table.text  # another tenant's sandbox is not listed
        assert "note=<b>bold</b>" in table.text and not table.find_elements(By.TAG_NAME, "b")  # a label is text

        browser.find_element(By.LINK_TEXT, sb.id).click()
        wait(browser, lambda d: d.find_elements(By.ID, "sandbox-state") and
             d.find_element(By.ID, "sandbox-state").text == "running")
        console = browser.find_element(By.ID, "console-cmd")
        console.send_keys("echo hello-$((6*7)); echo '<script>window.pwned=1</script><img src=x onerror=window.pwned=2>'")
        browser.find_element(By.ID, "console-run").click()
        stdout = wait(browser, lambda d: d.find_elements(By.ID, "console-stdout"))[0]
        shot(browser, "console")
        assert stdout.text.splitlines() == ["hello-42", "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"]
        output = browser.find_element(By.ID, "console-output")
        assert not output.find_elements(By.TAG_NAME, "script") and not output.find_elements(By.TAG_NAME, "img")
        assert browser.execute_script("return window.pwned === undefined")
        assert browser.find_element(By.ID, "console-exit").text == "0"

        # Another tenant's sandbox is a 404 here as in the API, whoever asks for its page.
        browser.get(f"{api}/ui/sandboxes/{theirs.id}")
        assert f"sandbox {theirs.id} not found" in browser.find_element(By.TAG_NAME, "body").text
        assert not browser.find_elements(By.ID, "sandbox-state")

        # State-changing POSTs need the session's CSRF token and this origin.
        jar = {"corral_ui": cookie["value"]}
        with httpx.Client(base_url=api, cookies=jar) as http:
            url = f"/ui/sandboxes/{sb.id}/exec"
            no_token = http.post(url, data={"cmd": "touch /tmp/forged"}, headers={"origin": api})
            assert no_token.status_code == 403 and no_token.json()["error"]["code"] == "csrf_refused"
            token = http.get("/ui").text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
            cross_site = http.post(url, data={"cmd": "touch /tmp/forged", "csrf": token},
                                   headers={"origin": "http://evil.example"})
            assert cross_site.status_code == 403
            assert sb.exec("test -e /tmp/forged").exit_code == 1  # neither ran
            ok = http.post(url, data={"cmd": "echo fine", "csrf": token}, headers={"origin": api})
            assert ok.status_code == 200 and "fine" in ok.text
            assert ok.headers["content-security-policy"].startswith("default-src 'none'")
            # Another tenant's sandbox is not reachable through the console either.
            theirs_exec = http.post(f"/ui/sandboxes/{theirs.id}/exec", data={"cmd": "id", "csrf": token},
                                    headers={"origin": api})
            assert "not found" in theirs_exec.text and "uid=" not in theirs_exec.text

        # Delete from the detail page: the record ends terminated.
        browser.get(f"{api}/ui/sandboxes/{sb.id}")
        browser.find_element(By.ID, "delete").click()
        wait(browser, expected_conditions.alert_is_present()).accept()
        wait(browser, lambda d: d.find_elements(By.ID, "sandbox-state") and
             d.find_element(By.ID, "sandbox-state").text == "terminated", timeout=120)
        shot(browser, "deleted")

    # The pages work under their CSP: the browser refused nothing (htmx, its config, our script).
    refused = [e["message"] for e in browser.get_log("browser") if "Content Security Policy" in e["message"]]
    assert refused == []
    browser.find_element(By.ID, "logout").click()
    wait(browser, lambda d: d.current_url.endswith("/ui/login"))
    with httpx.Client(base_url=api, cookies=jar) as http:  # the old cookie is dead server-side too
        assert http.get("/ui/sandboxes", follow_redirects=False).status_code == 303


def test_rollout_trajectory_shows_steps_and_replays(platform, browser):
    from selenium.webdriver.common.by import By

    api, job = platform["api"], f"ui-job-{secrets.token_hex(4)}"
    with Corral(api, platform["api_key"]) as corral:
        rollout = corral.rollouts.create("busybox", job_id=job, memory_mb=64)
        try:
            rollout.exec("echo '<i>step zero</i>'")
            rollout.exec("echo second")
            again = corral.rollouts.attach(rollout.id)
            again.exec("echo '<i>step zero</i>'")  # re-sent: answered from the log, counted
            assert again.replayed == 1

            log_in(browser, api, platform["api_key"])
            wait(browser, lambda d: d.find_elements(By.ID, "by-state"))
            browser.get(f"{api}/ui/rollouts?job={job}")
            wait(browser, lambda d: d.find_elements(By.LINK_TEXT, rollout.id))[0].click()
            rows = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.step-row"))
            shot(browser, "trajectory")
            assert len(rows) == 2
            assert [r.find_element(By.CSS_SELECTOR, "td.replays").text for r in rows] == ["1", "0"]
            first = rows[0].text
            assert "exec" in first and "<i>step zero</i>" in first  # the observation, as text
            assert not browser.find_element(By.ID, "trajectory").find_elements(By.TAG_NAME, "i")
        finally:
            rollout.finish()


def test_vm_screen_changes_after_typing(vm_platform, browser):
    """A vm sandbox's page shows its screen; text typed in the browser reaches the guest's shell
    (the command it typed ran) and the screen image changes."""
    from selenium.webdriver.common.by import By

    api = vm_platform["api"]
    log_in(browser, api, vm_platform["api_key"])
    wait(browser, lambda d: d.find_elements(By.ID, "by-state"))
    loaded = "return arguments[0].complete && arguments[0].naturalWidth"

    def frame(d):
        return next((e for e in d.find_elements(By.ID, "screen") if d.execute_script(loaded, e)), None)

    with Corral(api, vm_platform["api_key"]) as corral:
        with corral.sandboxes.create("busybox", display=True, memory_mb=256, wait_timeout=180) as sb:
            assert sb.info.backend == "vm"
            browser.get(f"{api}/ui/sandboxes/{sb.id}")
            before = wait(browser, frame).screenshot_as_png
            shot(browser, "vm-before")
            frame(browser).click()  # dashboard.js turns it into a click at that pixel of the guest
            wait(browser, lambda d: d.find_element(By.ID, "input-status").text.startswith("clicked at "))
            browser.find_element(By.ID, "type-text").send_keys("touch /tmp/typed-in-the-browser")
            browser.find_element(By.ID, "type-send").click()
            wait(browser, lambda d: d.find_element(By.ID, "input-status").text == "sent 1 text event")
            browser.find_element(By.ID, "key-enter").click()
            wait(browser, lambda d: d.find_element(By.ID, "input-status").text == "sent 1 key event")
            until_sync(lambda: sb.exec(["test", "-e", "/tmp/typed-in-the-browser"]).exit_code == 0, timeout_s=120,
                       what="the command typed in the browser to run in the guest", interval_s=1.0)
            # The page fetches a new frame every 2 s: one shows what was typed.
            wait(browser, lambda d: (img := frame(d)) is not None and img.screenshot_as_png != before, timeout=120)
            shot(browser, "vm-after")


def test_revoking_the_key_ends_its_dashboard_sessions_at_once(platform):
    """A session is only as good as the key it logged in with: revoked, the next page is the login."""
    api = platform["api"]
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {platform['operator_key']}"}) as admin:
        made = admin.post("/v1/admin/keys", json={"tenant": platform["tenant"], "name": "ui-session"})
        assert made.status_code == 201, made.text
        key_id, key = made.json()["id"], made.json()["key"]
    with httpx.Client(base_url=api, headers={"origin": api}) as http:
        login = http.post("/ui/login", data={"api_key": key}, follow_redirects=False)
        assert login.status_code == 303 and "corral_ui" in login.cookies
        assert http.get("/ui/sandboxes", follow_redirects=False).status_code == 200
        with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {platform['operator_key']}"}) as admin:
            assert admin.delete(f"/v1/admin/keys/{key_id}").status_code == 200
        page = http.get("/ui/sandboxes", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].endswith("/ui/login")


def test_sandbox_list_is_paged_and_the_nav_fits_a_phone(platform, browser):
    """issue 34: the sandbox page rendered (and re-polled every 2 s) every record; it shows one
    page and links the next. On a 420 px phone the page lays out at the phone's width and every
    nav link is on screen and clickable (the nav ran off it)."""
    from selenium.webdriver.common.by import By

    api, suite = platform["api"], f"ui-page-{secrets.token_hex(4)}"
    log_in(browser, api, platform["api_key"])
    wait(browser, lambda d: d.find_elements(By.ID, "by-state"))
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 420, "height": 900, "deviceScaleFactor": 2, "mobile": True})
    rows = "tr.sandbox-row"
    with Corral(api, platform["api_key"]) as corral:
        made = [corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": suite}) for _ in range(3)]
        try:
            browser.get(f"{api}/ui/sandboxes?label=suite={suite}&limit=2")
            first = [e.get_attribute("data-id") for e in wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, rows))]
            assert first == sorted(sb.id for sb in made)[:2]  # one page, in id order
            shot(browser, "sandbox-page-phone")
            assert browser.execute_script("return window.innerWidth") <= 420
            assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
            for link in browser.find_elements(By.CSS_SELECTOR, "header a"):
                hit = browser.execute_script(
                    "const r = arguments[0].getBoundingClientRect();"
                    "return r.left >= 0 && r.right <= window.innerWidth &&"
                    " document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2) === arguments[0];", link)
                assert hit, f"nav link {link.text!r} is off screen or covered at 420 px"
            browser.find_element(By.ID, "next-page").click()
            wait(browser, lambda d: [e.get_attribute("data-id") for e in d.find_elements(By.CSS_SELECTOR, rows)]
                 == sorted(sb.id for sb in made)[2:])
            assert not browser.find_elements(By.ID, "next-page") and browser.find_elements(By.ID, "first-page")
        finally:
            corral.sandboxes.delete_many(made)
