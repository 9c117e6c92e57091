"""`tracker serve` as a person uses it, in headless Chromium with real clicks and hovers (selenium
through chromedriver), on SQLite and PostgreSQL: open a run, hover a roofline point and read its
label, sort a table, open a layer phase from the roofline, compare two runs, run a query, filter the
runs and draw a history; and the browser's console holds no error."""

from __future__ import annotations

import os

import pytest
from served import serving, three_runs

pytest.importorskip("selenium")


def wait(driver, condition, seconds: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds).until(condition)


def test_a_person_reads_the_store_in_the_browser(browser, db):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    three_runs(db)
    with serving(db, os.environ.get("TRACKER_READER_URL")) as url:
        browser.get_log("browser")  # what earlier pages left
        browser.get(url + "/")
        browser.find_element(By.CSS_SELECTOR, 'input.filter[data-table="runs"]').send_keys("A100")
        shown = [row for row in browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr") if row.is_displayed()]
        assert [row.find_element(By.TAG_NAME, "td").text for row in shown] == ["3"]  # the PyTorch trace's
        browser.get(url + "/")
        browser.find_element(By.CSS_SELECTOR, 'a[href="/runs/1"]').click()
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#roofline .scatterlayer .points path"))

        point = browser.find_elements(By.CSS_SELECTOR, "#roofline .scatterlayer .points path")[0]
        ActionChains(browser).move_to_element(point).perform()
        label = wait(
            browser, lambda d: " ".join(e.text for e in d.find_elements(By.CSS_SELECTOR, ".hoverlayer .hovertext"))
        )
        assert "FLOP/B" in label and any(f"conv{n}" in label or "relu" in label or "fc" in label for n in range(1, 6))

        header = browser.find_element(By.CSS_SELECTOR, '#layers th[data-column="median_ms"]')
        header.click()
        column = [th.get_attribute("data-column") for th in browser.find_elements(By.CSS_SELECTOR, "#layers th")].index(
            "median_ms"
        )
        keys = [row.find_elements(By.TAG_NAME, "td")[column].get_attribute("data-sort")
                for row in browser.find_elements(By.CSS_SELECTOR, "#layers tbody tr")]  # fmt: skip
        numbers = [float(key) for key in keys if key not in ("", "None")]
        assert numbers == sorted(numbers) and len(numbers) > 20 and header.get_attribute("aria-sort") == "ascending"
        header.click()
        assert header.get_attribute("aria-sort") == "descending"

        point = browser.find_elements(By.CSS_SELECTOR, "#roofline .scatterlayer .points path")[0]
        ActionChains(browser).move_to_element(point).click().perform()
        wait(browser, lambda d: d.current_url.count("/") > url.count("/") + 2)
        assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Run 1: ")
        assert browser.find_elements(By.CSS_SELECTOR, "#launches tbody tr")

        browser.get(url + "/compare")
        Select(browser.find_element(By.NAME, "a")).select_by_value("1")
        Select(browser.find_element(By.NAME, "b")).select_by_value("2")
        browser.find_element(By.ID, "compare-runs").click()
        rows = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#comparison tbody tr"))
        assert len(rows) == 50 and "run 2 against run 1" in browser.page_source

        browser.get(url + "/sql")
        box = browser.find_element(By.ID, "query")
        box.clear()
        box.send_keys("SELECT COUNT(*) AS n FROM launch WHERE run_id = 1")
        browser.find_element(By.ID, "run-query").click()
        cell = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#answer tbody td"))
        assert cell[0].text == "57"

        browser.get(url + "/history?network=alexnet&batch=16")
        points = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#history .scatterlayer .points path"))
        assert len(points) == 2 and len(browser.find_elements(By.CSS_SELECTOR, "#history-runs tbody tr")) == 2

        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []
