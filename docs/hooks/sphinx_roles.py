"""A griffe extension for the API pages (mkdocs.yml): the docstrings write Sphinx roles such as
:mod:`graph.passes`, which Markdown would show as raw text; they render as code spans."""

import re

import griffe

ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj):`~?([^`]+)`")


class SphinxRolesAsCode(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
