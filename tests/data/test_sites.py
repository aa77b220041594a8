import pytest

from data.sites import normalize_url_path, site_of


@pytest.mark.parametrize("url,site", [
    ("http://127.0.0.1:7770/catalog/product", "shopping"),
    ("http://metis.lti.cs.cmu.edu:7780/admin", "shopping_admin"),
    ("http://localhost:9999/f/news", "reddit"),
    ("http://localhost:8023/root", "gitlab"),
    ("http://localhost:3000/#map", "map"),
    ("http://localhost:8888/wiki/X", "wikipedia"),
    ("https://dev282647.service-now.com/now/nav/ui", "servicenow"),
    ("https://www.Apple.com/shop", "apple.com"),
    ("about:blank", "about"),
])
def test_site_of(url, site):
    assert site_of(url) == site


def test_site_alias_table_is_configurable():
    assert site_of("http://host:1234/x", ports={1234: "custom"}) == "custom"
    assert site_of("https://a.corp.example/x", hosts={"*.corp.example": "corp"}) == "corp"


def test_normalize_url_path():
    assert normalize_url_path("https://WWW.Example.com/a/b/?q=1#f") == "example.com/a/b"
    assert normalize_url_path("http://localhost:7770/") == "localhost:7770/"
    # ServiceNow's wrapped route names the same page as the direct one.
    wrapped = ("https://dev1.service-now.com/now/nav/ui/classic/params/target/"
               "com.glideapp.servicecatalog_cat_item_view.do%3Fv%3D1%26sysparm_id%3D04b7")
    direct = "https://dev1.service-now.com/com.glideapp.servicecatalog_cat_item_view.do?v=1&sysparm_id=04b7"
    assert normalize_url_path(wrapped) == normalize_url_path(direct)
