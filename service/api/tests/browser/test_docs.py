"""/docs in headless Chromium: every operation expands, by keyboard, to its
parameters, body, responses, problem codes and examples."""

from __future__ import annotations

import json
import os

from conftest import shots_dir

ACQUIRE = "op-acquire_lock"


def test_acquire_expands_by_keyboard_to_its_409_lock_held_example(page, node):
    page.open(node.url + "/docs")
    page.wait_for(f"!!document.getElementById('{ACQUIRE}')", 10, "the acquire operation")
    assert page.evaluate(f"document.getElementById('{ACQUIRE}').open") is False
    # Keyboard: focus the summary and press Enter.
    page.evaluate(f"document.querySelector('#{ACQUIRE} > summary').focus()")
    page.press("Enter")
    page.wait_for(f"document.getElementById('{ACQUIRE}').open", 5, "acquire to expand")

    conflict = page.wait_for(f"""(() => {{
        const block = document.querySelector('#{ACQUIRE} .response[data-status="409"]');
        if (!block || !block.offsetParent) return null;
        return {{codes: block.querySelector('.codes').textContent,
                 example: block.querySelector('.example pre').textContent,
                 title: block.querySelector('.example-title').textContent}};
    }})()""", 5, "the visible 409 response")
    assert "lock_held" in conflict["codes"]
    example = json.loads(conflict["example"])
    assert example["code"] == "lock_held" and example["status"] == 409
    assert "holder" in example and "token" in example
    assert conflict["title"] == "Example"  # from the document, not generated

    body = page.evaluate(f"document.querySelector('#{ACQUIRE} .body').innerText")
    for expected in ("Parameters", "Idempotency-Key", "Request body", "wait_ms", "lock_delay_ms", "Responses",
                     "Baton-Fencing-Token", "invalid_wait"):
        assert expected in body, expected
    # Markdown: backticks become code elements, not raw text.
    assert "`wait_ms`" not in page.evaluate(f"document.querySelector('#{ACQUIRE} > summary').innerText")
    assert page.evaluate(f"document.querySelector('#{ACQUIRE} > summary code').textContent") == "wait_ms"
    # Deep link to a schema from the type column.
    assert page.evaluate("!!document.getElementById('schema-LockGrant')")
    assert page.exceptions == [], page.exceptions

    if shots_dir():
        directory = shots_dir()
        page.evaluate(f"document.getElementById('{ACQUIRE}').scrollIntoView()")
        page.screenshot(os.path.join(directory, "docs-desktop.png"), full_page=False)
        page.evaluate(f"document.querySelector('#{ACQUIRE} .response[data-status=\"409\"]').scrollIntoView()")
        page.screenshot(os.path.join(directory, "docs-desktop-409.png"), full_page=False)
        page.set_viewport(375, 812, mobile=True)
        page.wait_for("document.documentElement.clientWidth === 375", 5, "the phone viewport")
        assert page.evaluate("document.documentElement.scrollWidth") <= 375, "the page scrolls sideways at phone width"
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(os.path.join(directory, "docs-phone-top.png"), full_page=False)
        page.evaluate(f"document.querySelector('#{ACQUIRE} .response[data-status=\"409\"]').scrollIntoView()")
        page.screenshot(os.path.join(directory, "docs-phone-409.png"), full_page=False)
