import pytest

from data.actions import ActionParseError, extract_action, parse_action, split_agent_output


@pytest.mark.parametrize("text,canonical", [
    ("click('a252')", "click('a252')"),
    ('click("12", button="left")', "click('12')"),
    ("click('12', button='right')", "click('12', 'right')"),
    ("fill('34', \"it's here\")", "fill('34', \"it's here\")"),
    ("fill(bid='34', value='x')", "fill('34', 'x')"),
    ("scroll(0, 200)", "scroll(0, 200)"),
    ("go_back()", "go_back()"),
    ("noop(1000)", "noop()"),
    ("select_option('5', ['Blue', 'Red'])", "select_option('5', ['Blue', 'Red'])"),
    ("press('a112', 'Enter')", "press('a112', 'Enter')"),
    ("send_msg_to_user('Done: 3 items')", "send_msg_to_user('Done: 3 items')"),
    ("  tab_focus(1)\n", "tab_focus(1)"),
])
def test_canonical_form(text, canonical):
    assert parse_action(text).to_string() == canonical
    assert parse_action(canonical).to_string() == canonical   # a fixed point


def test_target_and_value():
    a = parse_action("fill('a203', 'Trello, Salesforce')")
    assert (a.op, a.bid, a.value) == ("fill", "a203", "Trello, Salesforce")
    assert parse_action("scroll(0, 300)").bid is None
    assert parse_action("click(42)").bid == "42"
    assert parse_action("click('7')").with_bid("9").to_string() == "click('9')"


@pytest.mark.parametrize("bad", [
    "", "click()", "explode('1')", "click(bid)", "click('1'); click('2')", "click('1', 'left', [], 3)",
    "fill('1', value='a', value='b')", "click('1', colour='red')", "__import__('os').system('x')",
    "click('')", "not python at all (",
])
def test_rejects_malformed(bad):
    with pytest.raises(ActionParseError):
        parse_action(bad)


def test_split_agent_output_takes_last_block():
    raw = "I think ```click('1')``` is wrong.\nInstead:\n```python\nfill('2', 'hi')\n```"
    thought, action = split_agent_output(raw)
    assert action == "fill('2', 'hi')"
    assert thought.startswith("I think")
    with pytest.raises(ActionParseError):
        split_agent_output("no code here")


@pytest.mark.parametrize("text,action", [
    # bare actions (GenericAgent's recorded action, WebPRMBench responses), a comment after it
    ("click('12')", "click('12')"),
    ("  fill('41', 'a (b)')\n", "fill('41', 'a (b)')"),
    ("click('12') # the order button", "click('12')"),
    # AgentLab / the search policy: a thought, then the action in the last fenced block
    ("I will search.\n```\nclick('10')\n```", "click('10')"),
    ("I think ```click('1')``` is wrong.\nInstead:\n```python\nfill('2', 'hi')\n```", "fill('2', 'hi')"),
    ("```send_msg_to_user('Done')```", "send_msg_to_user('Done')"),
    # code fences with a language tag, a comment or a label inside the block
    ("```py3\nscroll(0, 300)\n```", "scroll(0, 300)"),
    ("```python\n# the search box\nfill('7', 'shoes')\n```", "fill('7', 'shoes')"),
    ("Thought: the cart.\n```\nAction: click('a51')\n```", "click('a51')"),
    # PRM responses with THOUGHT/ACTION labels: the first call after the last label
    ("THOUGHT: not click('40') yet. ACTION: click('12')", "click('12')"),
    ("THOUGHT: first the menu.\nACTION:\nhover('3')\n", "hover('3')"),
    ("Thought: go\nAction: click( '12' )", "click('12')"),
    ("Action: click('5'). Action: press('5', 'Enter') and then click('9')", "press('5', 'Enter')"),
    # policy prose without a block or a label: the last call (the thought comes first)
    ("I will dblclick('5') then stop", "dblclick('5')"),
    ("I could click('5') or fill('6', 'x'); better: click('7')", "click('7')"),
    # a call inside another's arguments is not another call
    ("Reply: send_msg_to_user('use click(3)') then wait", "send_msg_to_user('use click(3)')"),
    # a call spelled wrongly before a good one (the scan goes on past the bad one)
    ("click(  and later go_back()", "go_back()"),
])
def test_extract_action(text, action):
    found = extract_action(text)
    assert found is not None and found.to_string() == action


@pytest.mark.parametrize("text", [
    "", "   ", None, 42, "I would rather wait", "no idea",
    # the last fenced block is the answer: no action in it, or several actions, is no one action
    "click('4') looks right but\n```\nI am not sure\n```",
    "```\nclick('1')\nclick('2')\n```",
    "explode('1') and dblclick()",
])
def test_extract_action_finds_none(text):
    assert extract_action(text) is None


def test_signatures_match_browsergym():
    """Every action the grammar accepts has BrowserGym's name, parameters (names and order) and
    defaults, and every BrowserGym action is accepted (browsergym.core.action.functions)."""
    import inspect

    functions = pytest.importorskip("browsergym.core.action.functions")
    from data.actions import _NO_DEFAULT, SIGNATURES

    theirs = {name: fn for name, fn in inspect.getmembers(functions, inspect.isfunction)
              if fn.__module__ == functions.__name__ and not name.startswith("_")}
    assert set(SIGNATURES) == set(theirs)
    for op, params in SIGNATURES.items():
        expected = [(p.name, _NO_DEFAULT if p.default is inspect.Parameter.empty else p.default)
                    for p in inspect.signature(theirs[op]).parameters.values()]
        assert list(params) == expected, op


def test_signatures_and_argument_types_match_browsergyms_functions():
    """Our table of BrowserGym's actions against the installed package's own functions: the same
    parameters, defaults and argument types (so a BrowserGym upgrade that changes them fails here)."""
    import inspect
    import typing

    from data.actions import _NO_DEFAULT, SIGNATURES, arg_type

    functions = pytest.importorskip("browsergym.core.action.functions")
    kinds = {str: "str", float: "number", int: "int", bool: "bool"}
    for op, params in SIGNATURES.items():
        theirs = inspect.signature(getattr(functions, op)).parameters
        assert [n for n, _ in params] == list(theirs), op
        for name, default in params:
            p = theirs[name]
            assert (p.default is inspect.Parameter.empty) == (default is _NO_DEFAULT), (op, name)
            if default is not _NO_DEFAULT:
                assert p.default == default, (op, name)
            ann, ours = p.annotation, arg_type(op, name)
            if typing.get_origin(ann) is typing.Literal:
                assert ours == frozenset(typing.get_args(ann)), (op, name)
            elif typing.get_origin(ann) is list:
                assert ours == ("list", frozenset(typing.get_args(typing.get_args(ann)[0]))), (op, name)
            elif ann in kinds:
                assert ours == ("bid" if name.endswith("bid") else kinds[ann]), (op, name)
            else:       # str | list[str]
                assert str(ann) == "str | list[str]" and ours == "str | list[str]", (op, name)
