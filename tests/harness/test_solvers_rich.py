"""harness.solvers_rich on AXTrees as BrowserGym flattens the MiniWoB++ pages (copied from real
episodes, trimmed): each solver acts on the page as it is, including a page another action left."""

from harness.miniwob import SUBSETS
from harness.solvers import SOLVERS, solve_step
from harness.solvers_rich import forward_nl

MOVIE_GOAL = "Search for crime movies directed by Holcomb from year 2010."

LABELS_BELOW = """RootWebArea 'Multi Layouts Task', focused
\t[14] textbox ''{genre}
\tStaticText 'Genre'
\t[17] textbox ''{director}
\tStaticText 'Director'
\t[20] textbox ''{year}
\tStaticText 'Year'
\tStaticText 'Search'"""

TABLE = """RootWebArea 'Multi Orderings Task', focused
\tStaticText 'Movie Search'
\t[13] table ''
\t\t[14] rowgroup ''
\t\t\t[15] row ''
\t\t\t\t[16] rowheader 'Director'
\t\t\t\t[17] cell ''
\t\t\t\t\t[18] textbox ''{director}
\t\t\t[19] row ''
\t\t\t\t[20] rowheader 'Year'
\t\t\t\t[21] cell ''
\t\t\t\t\t[22] textbox ''{year}
\t\t\t[23] row ''
\t\t\t\t[24] rowheader 'Movie Genre'
\t\t\t\t[25] cell ''
\t\t\t\t\t[26] textbox ''{genre}
\tStaticText 'Submit'"""


def boxes(genre="", director="", year=""):
    return {k: f" value='{v}'" if v else "" for k, v in (("genre", genre), ("director", director), ("year", year))}


def test_every_rich_task_has_a_solver():
    assert set(SUBSETS["rich"]) <= set(SOLVERS) and len(SUBSETS["rich"]) >= 15
    assert set(SUBSETS["axtree10"]) <= set(SOLVERS)


def test_movie_search_maps_labels_above_or_below_and_finds_the_hidden_submit():
    assert solve_step("multi-layouts", MOVIE_GOAL, LABELS_BELOW.format(**boxes())) == "fill('14', 'crime')"
    # a box another action filled wrongly is filled again; the others in any order
    assert solve_step("multi-layouts", MOVIE_GOAL, LABELS_BELOW.format(**boxes("crime", "Holc", "2010"))) \
        == "fill('17', 'Holcomb')"
    # all right: the "Search" div is the footer's child, after the last label (last box + 3)
    assert solve_step("multi-layouts", MOVIE_GOAL, LABELS_BELOW.format(**boxes("crime", "Holcomb", "2010"))) \
        == "click('23')"
    assert solve_step("multi-orderings", MOVIE_GOAL, TABLE.format(**boxes())) == "fill('18', 'Holcomb')"
    assert solve_step("multi-orderings", MOVIE_GOAL, TABLE.format(**boxes(director="Holcomb", year="2010"))) \
        == "fill('26', 'crime')"
    # the table's "Submit" div follows the last box
    assert solve_step("multi-orderings", MOVIE_GOAL, TABLE.format(**boxes("crime", "Holcomb", "2010"))) == "click('27')"
    assert solve_step("multi-orderings", "Book a flight.", TABLE.format(**boxes())) is None


INBOX = """RootWebArea 'Email Inbox Task', focused
\t[16] heading 'Primary'
\t[17] image ''
\tStaticText 'Hazel'
\tStaticText 'Nibh nisl.'
\tStaticText 'Cras dignissim...'
\t[26] image ''
\t[27] image ''
\tStaticText 'Carlynne'
\tStaticText 'Fringilla vel.'
\tStaticText 'Purus a, pulvin..'
\t[36] image ''
\t[37] image ''"""

OPEN_EMAIL = """RootWebArea 'Email Inbox Task', focused
\t[79] image ''
\t[81] image ''
\t[82] image ''
\tStaticText 'Fringilla vel.'
\tStaticText '{sender}'
\tStaticText 'to me'
\tStaticText 'Purus a, pulvinar ante. Quis velit. Arcu.'
\t[93] image ''
\tStaticText 'Reply'
\t[96] image ''
\tStaticText 'Forward'"""

REPLY = """RootWebArea 'Email Inbox Task', focused
\t[100] image ''
\tStaticText ''
\t[101] image ''
\t[104] LabelText ''
\t\tStaticText 'to:'
\tStaticText 'Carlynne'
\t[107] LabelText ''
\t\tStaticText 'subject:'
\tStaticText 'Re: Fringilla vel.'
\t[109] textbox ''{text}"""


def test_email_intents_from_the_inbox_an_open_email_and_the_reply_form():
    reply = 'Find the email by Carlynne and reply to them with the text "Ornare commodo.".'
    assert solve_step("email-inbox", reply, INBOX) == "click('30')"        # the sender line: trash - 6
    assert solve_step("email-inbox", reply, OPEN_EMAIL.format(sender="Carlynne")) == "click('93')"
    assert solve_step("email-inbox", reply, OPEN_EMAIL.format(sender="Hazel")) == "click('79')"    # wrong one: close
    assert solve_step("email-inbox", reply, REPLY.format(text="")) == "fill('109', 'Ornare commodo.')"
    assert solve_step("email-inbox", reply, REPLY.format(text=" value='Ornare commodo.'")) == "click('101')"
    delete = "Find the email by Hazel and click the trash icon to delete it."
    star = "Find the email by Carlynne and click the star icon to mark it as important."
    assert solve_step("email-inbox-delete", delete, INBOX) == "click('26')"
    assert solve_step("email-inbox", star, INBOX) == "click('37')"
    assert solve_step("email-inbox", star, OPEN_EMAIL.format(sender="Carlynne")) == "click('82')"
    assert solve_step("email-inbox", delete.replace("Hazel", "Nobody"), INBOX) is None
    forward = "Find the email by Carlynne and forward that email to Roslyn."
    assert solve_step("email-inbox-forward", forward, OPEN_EMAIL.format(sender="Carlynne")) == "click('96')"
    # a reply form is not a forward form: close it
    assert solve_step("email-inbox-forward", forward, REPLY.format(text="")) == "click('100')"


def test_forward_nl_reads_sender_and_recipient_from_every_phrasing():
    for goal in ("Please forward the information from Margaretta to Roslyn.",
                 "Send Roslyn the email you got from Margaretta.", "Roslyn wants the email Margaretta sent to you.",
                 "Margaretta wants his or her message to be sent to Roslyn.",
                 "Get Margaretta email and then forward it to Roslyn please."):
        assert forward_nl(goal) == ("forward", "Margaretta", "Roslyn"), goal
    assert forward_nl("Forward it.") is None


TREE = """RootWebArea 'Navigate Tree Task', focused
\t[16] list ''
\t\t[17] listitem ''
\t\t\tStaticText 'Cheree'
\t\t[19] listitem ''
\t\t\tStaticText 'Sergio'
\t\t[21] listitem ''
\t\t\tStaticText 'Joye'
{inside}\t\t[33] listitem ''
\t\t\tStaticText 'Livia'"""

JOYE_OPEN = """\t\t\t[24] list ''
\t\t\t\t[25] listitem ''
\t\t\t\t\tStaticText 'Lyda'
"""


def test_navigate_tree_opens_closed_folders_in_order_and_clicks_the_name():
    goal = 'Navigate through the file tree. Find and click on the folder or file named "{}".'
    assert solve_step("navigate-tree", goal.format("Sergio"), TREE.format(inside="")) == "click('19')"
    # not shown: open the first closed folder (Joye: 12 numbers to the next item), by its name span
    assert solve_step("navigate-tree", goal.format("Lyda"), TREE.format(inside="")) == "click('23')"
    assert solve_step("navigate-tree", goal.format("Lyda"), TREE.format(inside=JOYE_OPEN)) == "click('25')"
    # an open folder that is the target: its name, not the middle of its subtree
    assert solve_step("navigate-tree", goal.format("Joye"), TREE.format(inside=JOYE_OPEN)) == "click('23')"


AUTOCOMPLETE = """RootWebArea 'Use Autocomplete Task', focused
\t[16] LabelText ''
\t\tStaticText 'Tags:'
\t[17] textbox 'Tags:'{value}
\t[18] button 'Submit'
{menu}\t[20] status '', live='assertive', atomic, relevant='additions'
\t\tStaticText '{status}'"""

MENU = """\t[19] list ''
\t\t[21] listitem ''
\t\t\tStaticText 'Poland'
\t\t[23] listitem ''
\t\t\tStaticText 'Portugal'
"""


def test_autocomplete_types_the_start_opens_the_menu_and_picks_a_fitting_item():
    goal = 'Enter an item that starts with "Po" and ends with "gal".'
    page = AUTOCOMPLETE.format
    assert solve_step("use-autocomplete", goal, page(value="", menu="", status="")) == "fill('17', 'Po')"
    assert solve_step("use-autocomplete", goal, page(value=" value='Po'", menu="", status="")) \
        == "press('17', 'ArrowDown')"
    assert solve_step("use-autocomplete", goal, page(value=" value='Poland'", menu=MENU, status="Poland")) \
        == "click('23')"
    assert solve_step("use-autocomplete", goal, page(value=" value='Portugal'", menu="", status="Portugal")) \
        == "click('18')"
    # a whole item typed as the start counts once the live region announces it picked
    oman = 'Enter an item that starts with "Oman".'
    assert solve_step("use-autocomplete", oman, page(value=" value='Oman'", menu="", status="")) \
        == "press('17', 'ArrowDown')"
    assert solve_step("use-autocomplete", oman, page(value=" value='Oman'", menu="", status="Oman")) == "click('18')"


def test_forms_date_sequence_and_popup():
    date = """RootWebArea 'Enter Date Task', focused
\t[14] Date ''
\t\t[14] spinbutton 'Month' value={m}, valuemin=1, valuemax=12, valuetext=''
\t\t[14] spinbutton 'Day' value={d}, valuemin=1, valuemax=31, valuetext=''
\t\t[14] spinbutton 'Year' value={y}, valuemin=1, valuemax=275760, valuetext=''
\t[15] button 'Submit'"""
    goal = "Enter 02/04/2012 as the date and hit submit."
    assert solve_step("enter-date", goal, date.format(m=0, d=0, y=0)) == "fill('14', '2012-02-04')"
    assert solve_step("enter-date", goal, date.format(m=2, d=5, y=2012)) == "fill('14', '2012-02-04')"
    assert solve_step("enter-date", goal, date.format(m=2, d=4, y=2012)) == "click('15')"
    form = """RootWebArea 'Form Sequence Task', focused
\t[16] radio '', checked='{r}'
\t[17] radio '', checked='false'
\t[18] radio '', checked='false'
\t[20] textbox ''{a}
\t[21] textbox ''
\t[22] textbox ''{c}
\t[24] button 'Submit'"""
    goal = 'Check the 1st radio button and enter the number "16" into the 3rd textbox.'
    assert solve_step("form-sequence-2", goal, form.format(r="false", a="", c="")) == "click('16')"
    assert solve_step("form-sequence-2", goal, form.format(r="true", a=" value='16'", c="")) == "fill('20', '')"
    assert solve_step("form-sequence-2", goal, form.format(r="true", a="", c="")) == "fill('22', '16')"
    assert solve_step("form-sequence-2", goal, form.format(r="true", a="", c=" value='16'")) == "click('24')"
    popup = """RootWebArea 'Login User Popup Task', focused
\t[14] paragraph ''
\t\t[15] LabelText ''
\t\t\tStaticText 'Username'
\t\t[16] textbox '' value='cierra'
\t[17] paragraph ''
\t\t[18] LabelText ''
\t\t\tStaticText 'Password'
\t\t[19] textbox ''
\t[20] button 'OK'{popup}"""
    goal = 'Enter the username "cierra" and the password "11L" into the text fields and press login.'
    shown = "\n\tStaticText 'Your session is about to expire.'\n\t[30] button 'OK'\n\t[31] button 'Cancel'"
    assert solve_step("login-user-popup", goal, popup.format(popup=shown)) == "click('31')"
    assert solve_step("login-user-popup", goal, popup.format(popup="")) == "fill('19', '11L')"
