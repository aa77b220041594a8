"""harness.solvers on AXTrees as BrowserGym flattens the MiniWoB++ pages (copied from real
observations): each solver acts on the page as it is, so it also finishes from a state another
action left; it says None when the page lacks what the goal names."""

import pytest

from harness.miniwob import SUBSETS
from harness.solvers import SOLVERS, selection, solve_step

CHECKBOXES = """RootWebArea 'Click Checkboxes Task', focused
\t[17] LabelText ''
\t\t[18] checkbox '11LO', checked='{a}'
\t\tStaticText '11LO'
\t[20] LabelText ''
\t\t[21] checkbox 'Nb', checked='{b}'
\t\tStaticText 'Nb'
\t[23] LabelText ''
\t\t[24] checkbox 'Ne', checked='{c}'
\t\tStaticText 'Ne'
\t[27] button 'Submit'"""

LOGIN = """RootWebArea 'Login User Task', focused
\t[14] paragraph ''
\t\t[15] LabelText ''
\t\t\tStaticText 'Username'
\t\t[16] textbox ''{user}
\t[17] paragraph ''
\t\t[18] LabelText ''
\t\t\tStaticText 'Password'
\t\t[19] textbox ''{password}
\t[20] button 'Login'"""

LIST = """RootWebArea 'Choose List Task', focused
\t[13] combobox '' value='{value}', hasPopup='menu', expanded=False
\t\tMenuListPopup ''
\t\t\t[14] option 'Kazakhstan', selected=True
\t\t\t[20] option 'Norfolk Island', selected=False
\t[21] button 'Submit'"""

TABS = """RootWebArea 'Click Tab Task', focused
\t[17] tablist '', multiselectable=False, orientation='horizontal'
\t\t[18] tab 'Tab #1', expanded=True, selected=True, controls='tabs-1'
\t\t\t[19] link 'Tab #1', url='file:///m/click-tab.html#tabs-1'
\t\t[20] tab 'Tab #2', expanded=False, selected=False
\t\t\t[21] link 'Tab #2', url='file:///m/click-tab.html#tabs-2'"""


def test_every_axtree10_task_has_a_solver():
    assert set(SUBSETS["axtree10"]) <= set(SOLVERS)
    with pytest.raises(KeyError):
        solve_step("click-menu", "Click on Tab #2.", TABS)


def test_checkboxes_fix_each_wrong_box_then_submit():
    goal = "Select Nb, Ne and click Submit."
    assert selection(goal) == ["Nb", "Ne"] and selection("Select nothing and click Submit.") == []
    assert solve_step("click-checkboxes", goal, CHECKBOXES.format(a="false", b="false", c="false")) == "click('21')"
    # a box another action checked by mistake is unchecked first
    assert solve_step("click-checkboxes", goal, CHECKBOXES.format(a="true", b="true", c="false")) == "click('18')"
    assert solve_step("click-checkboxes", goal, CHECKBOXES.format(a="false", b="true", c="true")) == "click('27')"
    assert solve_step("miniwob.click-checkboxes", "Select nothing and click Submit.",
                      CHECKBOXES.format(a="false", b="false", c="false")) == "click('27')"
    assert solve_step("click-checkboxes", "Select Zz and click Submit.",
                      CHECKBOXES.format(a="false", b="false", c="false")) is None


def test_login_fills_what_differs_and_reads_a_masked_password():
    goal = 'Enter the username "cierra" and the password "11L" into the text fields and press login.'
    assert solve_step("login-user", goal, LOGIN.format(user="", password="")) == "fill('16', 'cierra')"
    assert solve_step("login-user", goal, LOGIN.format(user=" value='cierra'", password="")) == "fill('19', '11L')"
    masked = LOGIN.format(user=" value='cierra'", password=" value='\u2022\u2022\u2022'")
    assert solve_step("login-user", goal, masked) == "click('20')"
    # a wrong user name (another action typed it) is typed again; a password of another length too
    assert solve_step("login-user", goal, LOGIN.format(user=" value='juan'", password="")) == "fill('16', 'cierra')"
    assert solve_step("login-user", goal, LOGIN.format(user=" value='cierra'", password=" value='\u2022\u2022'")) \
        == "fill('19', '11L')"


def test_lists_text_and_clicks():
    goal = "Select Norfolk Island from the list and click Submit."
    assert solve_step("choose-list", goal, LIST.format(value="Kazakhstan")) == "select_option('13', 'Norfolk Island')"
    assert solve_step("choose-list", goal, LIST.format(value="Norfolk Island")) == "click('21')"
    peru = "Select Peru from the list and click Submit."
    assert solve_step("choose-list", peru, LIST.format(value="Kazakhstan")) is None
    text = "RootWebArea ''\n\t[14] textbox ''{v}\n\t[15] button 'Submit'"
    goal = 'Enter "Myron" into the text field and press Submit.'
    assert solve_step("enter-text", goal, text.format(v="")) == "fill('14', 'Myron')"
    assert solve_step("enter-text", goal, text.format(v=" value='Myro'")) == "fill('14', 'Myron')"
    assert solve_step("enter-text", goal, text.format(v=" value='Myron'")) == "click('15')"
    assert solve_step("click-tab", "Click on Tab #2.", TABS) == "click('21')"
    buttons = "RootWebArea ''\n\t[13] button 'no'\n\t[15] button 'Ok'"
    assert solve_step("click-button", 'Click on the "Ok" button.', buttons) == "click('15')"
    assert solve_step("click-button", 'Click on the "yes" button.', buttons) is None
    radios = ("RootWebArea ''\n\t[18] radio '11LO', checked='{a}'\n\t[21] radio 'Nb', checked='false'"
              "\n\t[27] button 'Submit'")
    assert solve_step("click-option", "Select 11LO and click Submit.", radios.format(a="false")) == "click('18')"
    assert solve_step("click-option", "Select 11LO and click Submit.", radios.format(a="true")) == "click('27')"
    assert solve_step("click-option", "Click the button.", radios.format(a="true")) is None    # not its goal
