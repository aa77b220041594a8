"""harness.solvers_rich on AXTrees as BrowserGym flattens the MiniWoB++ pages (copied from real
episodes, trimmed): each solver acts on the page as it is, including a page another action left."""

from harness.miniwob import SUBSETS
from harness.solvers import SOLVERS, solve_step
from harness.solvers_rich import forward_nl
from search.tournament import read_actions

MOVIE_GOAL = "Search for crime movies directed by Holcomb from year 2010."

LABELS_BELOW = """RootWebArea 'Multi Layouts Task', focused
\t[14] textbox ''{genre}
\tStaticText 'Genre'
\t[17] textbox ''{director}
\tStaticText 'Director'
\t[20] textbox ''{year}
\tStaticText 'Year'
\t[23] generic, clickable=True
\t\tStaticText 'Search'"""

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
\t[27] generic, clickable=True
\t\tStaticText 'Submit'"""


def boxes(genre="", director="", year=""):
    return {k: f" value='{v}'" if v else "" for k, v in (("genre", genre), ("director", director), ("year", year))}


def test_every_rich_task_has_a_solver():
    assert set(SUBSETS["rich"]) <= set(SOLVERS) and len(SUBSETS["rich"]) >= 15
    assert set(SUBSETS["axtree10"]) <= set(SOLVERS)


def printed(action: str, axtree: str) -> bool:
    """The action's bid is one the AXTree prints (what search.miniwob's screen asks)."""
    return read_actions([action], axtree)[0].dropped is None


def test_movie_search_maps_labels_above_or_below_and_clicks_the_submit_div():
    assert solve_step("multi-layouts", MOVIE_GOAL, LABELS_BELOW.format(**boxes())) == "fill('14', 'crime')"
    # a box another action filled wrongly is filled again; the others in any order
    assert solve_step("multi-layouts", MOVIE_GOAL, LABELS_BELOW.format(**boxes("crime", "Holc", "2010"))) \
        == "fill('17', 'Holcomb')"
    # all right: the "Search" div (a plain div with a click handler)
    assert solve_step("multi-layouts", MOVIE_GOAL, LABELS_BELOW.format(**boxes("crime", "Holcomb", "2010"))) \
        == "click('23')"
    assert solve_step("multi-orderings", MOVIE_GOAL, TABLE.format(**boxes())) == "fill('18', 'Holcomb')"
    assert solve_step("multi-orderings", MOVIE_GOAL, TABLE.format(**boxes(director="Holcomb", year="2010"))) \
        == "fill('26', 'crime')"
    # the "Submit" div: its bid is printed, so search.miniwob's screen lets the click through
    done = TABLE.format(**boxes("crime", "Holcomb", "2010"))
    assert solve_step("multi-orderings", MOVIE_GOAL, done) == "click('27')" and printed("click('27')", done)
    assert solve_step("multi-orderings", MOVIE_GOAL, done.replace(", clickable=True", "")) is None
    assert solve_step("multi-orderings", "Book a flight.", TABLE.format(**boxes())) is None


INBOX = """RootWebArea 'Email Inbox Task', focused
\t[16] heading 'Primary'
\t[17] image ''
\t[18] generic, clickable=True
\t\tStaticText 'Hazel'
\t\tStaticText 'Nibh nisl.'
\t\tStaticText 'Cras dignissim...'
\t\t[26] image ''
\t\t[27] image ''
\t[28] generic, clickable=True
\t\tStaticText 'Carlynne'
\t\tStaticText 'Fringilla vel.'
\t\tStaticText 'Purus a, pulvin..'
\t\t[36] image ''
\t\t[37] image ''"""

OPEN_EMAIL = """RootWebArea 'Email Inbox Task', focused
\t[79] image ''
\t[81] image ''
\t[82] image ''
\tStaticText 'Fringilla vel.'
\tStaticText '{sender}'
\tStaticText 'to me'
\tStaticText 'Purus a, pulvinar ante. Quis velit. Arcu.'
\t[92] generic, clickable=True
\t\t[93] image ''
\t\tStaticText 'Reply'
\t[95] generic, clickable=True
\t\t[96] image ''
\t\tStaticText 'Forward'"""

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
    assert solve_step("email-inbox", reply, INBOX) == "click('28')"        # the email's line, a plain div
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
\t\t\t[22] generic, clickable=True
\t\t\t[23] generic, clickable=True
\t\t\t\tStaticText 'Joye'
{inside}\t\t[35] listitem ''
\t\t\t[36] generic, clickable=True
\t\t\t[37] generic, clickable=True
\t\t\t\tStaticText 'Livia'"""

JOYE_OPEN = """\t\t\t[24] list ''
\t\t\t\t[25] listitem ''
\t\t\t\t\tStaticText 'Lyda'
\t\t\t\t[27] listitem ''
\t\t\t\t\t[28] generic, clickable=True
\t\t\t\t\t[29] generic, clickable=True
\t\t\t\t\t\tStaticText 'Dona'
\t\t\t\t\t[30] list ''
"""     # a file, and an empty folder, open: its list is empty


def test_navigate_tree_opens_closed_folders_in_order_and_clicks_the_item():
    goal = 'Navigate through the file tree. Find and click on the folder or file named "{}".'
    assert solve_step("navigate-tree", goal.format("Sergio"), TREE.format(inside="")) == "click('19')"
    # a folder: its name (a span), whose click the item's handler sees
    assert solve_step("navigate-tree", goal.format("Livia"), TREE.format(inside="")) == "click('37')"
    # not shown: open the first closed folder (Joye), by its name
    assert solve_step("navigate-tree", goal.format("Lyda"), TREE.format(inside="")) == "click('23')"
    assert solve_step("navigate-tree", goal.format("Lyda"), TREE.format(inside=JOYE_OPEN)) == "click('25')"
    # Joye and the empty Dona are open: Livia is the closed folder left
    assert solve_step("navigate-tree", goal.format("Nobody"), TREE.format(inside=JOYE_OPEN)) == "click('37')"


TABS = """RootWebArea 'Click Tab Task', focused
\t[17] tablist '', multiselectable=False, orientation='horizontal'
\t\t[18] tab '1', expanded={one}, selected={one}, controls='tabs-1'
\t\t\t[19] link '1', url='click-tab-2-hard.html#tabs-1'
\t\t[20] tab '2', expanded={two}, selected={two}
\t\t\t[21] link '2', url='click-tab-2-hard.html#tabs-2'
\t[30] tabpanel '{panel}'
\t\t[31] paragraph ''
\t\t\tStaticText 'Et, facilisis quis semper leo. Aliquet'
\t\t\t[32] generic, clickable=True
\t\t\t\tStaticText '{link}'
\t\t\tStaticText 'id ornare faucibus nulla leo.'"""

SECTIONS = """RootWebArea 'Click Collapsible Task', focused
\t[15] tablist '', multiselectable=False, orientation='horizontal'
\t\t[16] tab 'Section #1', expanded={one}, selected={one}
{panel}\t\t[20] tab 'Section #2', expanded=False, selected=False
\t\t[25] tab 'Section #3', expanded=False, selected=False"""


def test_link_words_show_one_tab_or_section_at_a_time():
    goal = 'Switch between the tabs to find and click on the link "{}".'
    first = TABS.format(one=True, two=False, panel="1", link="turpis")
    assert solve_step("click-tab-2-hard", goal.format("turpis"), first) == "click('32')"
    # a plain word is no link; not shown: the next tab (by its link), then round to the first
    assert solve_step("click-tab-2-hard", goal.format("leo."), first) == "click('21')"
    second = TABS.format(one=False, two=True, panel="2", link="lorem")
    assert solve_step("click-tab-2-hard", goal.format("turpis"), second) == "click('19')"
    goal = 'Expand the sections below, to find and click on the link "{}".'
    shut = SECTIONS.format(one=False, panel="")
    assert solve_step("click-collapsible-2", goal.format("turpis"), shut) == "click('16')"
    panel = "\t\t[17] tabpanel 'Section #1'\n\t\t\t[19] generic, clickable=True\n\t\t\t\tStaticText 'turpis'\n"
    assert solve_step("click-collapsible-2", goal.format("turpis"), SECTIONS.format(one=True, panel=panel)) \
        == "click('19')"
    assert solve_step("click-collapsible-2", goal.format("leo"), SECTIONS.format(one=True, panel=panel)) \
        == "click('20')"

    # click-link: the words on the page, no tabs; a word that is no link gives nothing to do
    page = ("RootWebArea 'Click Link Task', focused\n\t[31] paragraph ''\n\t\tStaticText 'Et, facilisis leo.'\n"
            "\t\t[32] generic, clickable=True\n\t\t\tStaticText 'turpis'\n\t\tStaticText 'id ornare.'")
    goal = 'Click on the link "{}".'
    assert solve_step("click-link", goal.format("turpis"), page) == "click('32')"
    assert solve_step("click-link", goal.format("leo."), page) is None


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


RESULTS = """RootWebArea 'Search Engine Task', focused
\t[15] textbox '' value='{typed}'
\t[16] button 'Search'
\t[46] link '{first}', url='file:///m/search-engine.html#'
\tStaticText 'https://www.a.jp'
\t[50] link 'Vanda', url='file:///m/search-engine.html#'
\t[54] link 'Alan', url='file:///m/search-engine.html#'
\t[18] list ''
{prev}\t\t[61] listitem ''
\t\t\t[62] link '1', url='file:///m/search-engine.html#'
\t\t[63] listitem ''
\t\t\t[64] link '2', url='file:///m/search-engine.html#'
\t\t[65] listitem ''
\t\t\t[66] link '3', url='file:///m/search-engine.html#'
\t\t[67] listitem ''
\t\t\t[68] link '>', url='file:///m/search-engine.html#'"""
PREV = "\t\t[59] listitem ''\n\t\t\t[60] link '<', url='file:///m/search-engine.html#'\n"


def test_search_engine_pages_to_the_result_and_clicks_it_without_following_the_link():
    goal = 'Use the textbox to enter "Kasie" and press "Search", then find and click the 4th search result.'
    page = RESULTS.format
    assert solve_step("search-engine", goal, "RootWebArea ''\n\t[15] textbox ''\n\t[16] button 'Search'") \
        == "fill('15', 'Kasie')"
    assert solve_step("search-engine", goal, "RootWebArea ''\n\t[15] textbox '' value='Kasie'\n"
                                             "\t[16] button 'Search'\n\t[18] list ''") == "click('16')"
    # no '<': page 1; the 4th result is the first of page 2
    assert solve_step("search-engine", goal, page(typed="Kasie", first="Kasie", prev="")) == "click('64')"
    action = solve_step("search-engine", goal, page(typed="Kasie", first="Kasie", prev=PREV))
    assert action == "click('46', modifiers=['Alt'])" and printed(action, page(typed="Kasie", first="Kasie", prev=PREV))
    # page 2 of results for another name (typed before): search again
    assert solve_step("search-engine", goal, page(typed="Kasie", first="Annis", prev=PREV)) == "click('16')"


FLIGHT_FORM = """RootWebArea 'Book Flight Task', focused
\t[17] heading 'Book Your One-Way Flight'
\t[19] textbox 'From:'{origin}
\t[21] textbox 'To:'{destination}
\tStaticText 'Departure Date'
\t[25] textbox ''{date}
\t[27] button 'Search'
{menu}"""
SHG_MENU = """\t[31] list ''
\t\t[38] listitem ''
\t\t\tStaticText 'Shungnak, AK (SHG)'"""
CALENDAR = """\t[35] link 'Prev'
\tStaticText 'Next'
\tStaticText '{month}'
\tStaticText ''
\tStaticText '2016'
\t[42] table ''
\t\t[74] cell '5'
\t\t\t[75] link '5', url='file:///m/book-flight.html#'"""
FLIGHTS = """RootWebArea 'Book Flight Task', focused
\t[142] button 'Back'
\tStaticText 'CRP to SHG'
\t[164] LabelText ''
\t\tStaticText 'Duration:'
\tStaticText '28h 49m'
\t[168] button 'Book flight for $479'
\t[186] LabelText ''
\t\tStaticText 'Duration:'
\tStaticText '2h 25m'
\t[190] button 'Book flight for $991'"""


def test_book_flight_completes_both_airports_picks_the_day_and_books_the_best():
    goal = "Book the {} one-way flight from: Corpus Christi, TX to: SHG on 12/05/2016."
    crp = " value='Corpus Christi, TX (CRP)'"
    form = FLIGHT_FORM.format
    assert solve_step("book-flight", goal.format("shortest"), form(origin="", destination="", date="", menu="")) \
        == "fill('19', 'Corpus Christi, TX')"
    assert solve_step("book-flight", goal.format("shortest"),
                      form(origin=crp, destination=" value='SHG'", date="", menu="")) == "press('21', 'ArrowDown')"
    # the open menu covers the fields below it: pick the entry first
    assert solve_step("book-flight", goal.format("shortest"), form(
        origin=crp, destination=" value='Shungnak, AK (SHG)', focused", date="", menu=SHG_MENU)) == "click('38')"
    done = dict(origin=crp, destination=" value='Shungnak, AK (SHG)'")
    assert solve_step("book-flight", goal.format("shortest"), form(**done, date="", menu="")) == "click('25')"
    november = CALENDAR.format(month="November").replace("\tStaticText 'Next'", "\t[37] link 'Next'")
    assert solve_step("book-flight", goal.format("shortest"), form(**done, date="", menu=november)) == "click('37')"
    assert solve_step("book-flight", goal.format("shortest"),
                      form(**done, date="", menu=CALENDAR.format(month="December"))) == "click('75')"
    assert solve_step("book-flight", goal.format("shortest"), form(**done, date=" value='12/05/2016'", menu="")) \
        == "click('27')"
    assert solve_step("book-flight", goal.format("shortest"), FLIGHTS) == "click('190')"
    assert solve_step("book-flight", goal.format("cheapest"), FLIGHTS) == "click('168')"


def test_time_date_and_scroll_list():
    time = """RootWebArea 'Enter Time Task', focused
\t[14] InputTime ''
\t\t[14] spinbutton 'Hours' value={h}, valuemin=1, valuemax=12, valuetext=''
\t\t[14] spinbutton 'Minutes' value={m}, valuemin=0, valuemax=59, valuetext=''
\t\t[14] spinbutton 'AM/PM' value={p}, valuemin=1, valuemax=2, valuetext=''
\t[15] button 'Submit'"""
    assert solve_step("enter-time", "Enter 11:10 PM as the time and press submit.", time.format(h=0, m=0, p=0)) \
        == "fill('14', '23:10')"
    assert solve_step("enter-time", "Enter 12:05 AM as the time and press submit.", time.format(h=12, m=5, p=2)) \
        == "fill('14', '00:05')"
    assert solve_step("enter-time", "Enter 12:05 AM as the time and press submit.", time.format(h=12, m=5, p=1)) \
        == "click('15')"
    date = ("RootWebArea ''\n\t[16] paragraph ''\n\t\tStaticText 'Date:'\n\t\t[17] textbox ''{v}\n"
            "\t[19] button 'Submit'\n{cal}")
    goal = "Select 12/05/2016 as the date and hit submit."
    assert solve_step("choose-date", goal, date.format(v="", cal="")) == "click('17')"
    assert solve_step("choose-date", goal.replace("12/", "10/"), date.format(v="", cal=CALENDAR.format(
        month="December"))) == "click('35')"          # back two months, one at a time
    assert solve_step("choose-date", goal, date.format(v=" value='12/05/2016'", cal="")) == "click('19')"
    scroll = """RootWebArea 'Choose List Task', focused
\t[13] listbox '', multiselectable=True, orientation='vertical'
\t\t[14] option 'Ertha', selected={a}
\t\t[15] option 'Merridie', selected=False
\t\t[18] option 'Aurel', selected={b}
\t[23] button 'Submit'"""
    goal = "Select Ertha, Aurel from the scroll list and click Submit."
    assert solve_step("click-scroll-list", goal, scroll.format(a=False, b=False)) \
        == "select_option('13', ['Ertha', 'Aurel'])"
    assert solve_step("click-scroll-list", goal, scroll.format(a=True, b=True)) == "click('23')"
