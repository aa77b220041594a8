"""dataset: the output end of a synthesis run: the exports for training and evaluation
(``dataset.export``), the dataset card (``dataset.card``) and the report (``dataset.report``).

It sits above ``teacher`` in the layering so that it reads ``preferences.parquet`` with the
teacher's pinned schema (``teacher.schema``)."""
