"""Readers turn a source format into canonical :class:`data.schema.StepRecord` rows.

Each reader yields ``StepRecord`` or :class:`data.rundir.Reject` items, one per input record,
so the ingest stage can count every record in and out.
"""
