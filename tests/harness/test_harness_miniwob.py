"""harness.miniwob without a browser: seeds, task names and subsets, the wheel's task pages."""

import pytest

import harness.miniwob as mw


def test_seeds_ranges_and_lists():
    assert mw.parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert mw.parse_seeds("3,0,7") == [3, 0, 7]
    assert mw.parse_seeds("0-2, 9,1") == [0, 1, 2, 9]
    for bad in ("2-1", "x", "1-"):
        with pytest.raises(ValueError, match="--seeds"):
            mw.parse_seeds(bad)


def test_task_names_prefixes_and_subsets():
    known = mw.task_classes()
    assert len(known) == 125 and known["click-button"].__name__ == "ClickButtonTask"
    assert mw.select_tasks(["miniwob.click-button", "click-button", "enter-text"], known) == ["click-button",
                                                                                             "enter-text"]
    assert mw.select_tasks(None, known) == mw.SUBSETS["axtree10"] and len(mw.SUBSETS["axtree10"]) == 10
    assert len(mw.select_tasks(["all"], known)) == 125
    with pytest.raises(mw.MiniWoBSetupError, match=r"unknown MiniWoB task\(s\) \['click-buton'\]"):
        mw.select_tasks(["click-buton"], known)


def test_the_wheel_holds_every_page_and_a_wrong_folder_is_named(tmp_path):
    url = mw.default_url()
    assert url.startswith("file://") and url.endswith("/html/miniwob/")
    mw.check_pages(url, list(mw.task_classes()))
    with pytest.raises(mw.MiniWoBSetupError, match=r"no page for \['click-button'\]"):
        mw.check_pages(tmp_path.as_uri() + "/", ["click-button"])
