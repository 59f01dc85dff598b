"""Path templates (selfknow.paths, selfknow.protocols.<paper>.paths): a template filled in part
keeps the other fields as Snakemake wildcards; a field it lacks is an error."""
import pytest

from selfknow.paths import ITEMS, fill
from selfknow.protocols.persistent.paths import CONF, SC


def test_a_partly_filled_template_keeps_the_other_fields_as_wildcards():
    assert fill(SC, stage="sc", split="test") == "persistent/sc/{model}/{ckpt}/{dataset}/test.parquet"
    assert fill(CONF, model="m", dataset="d", variant="transfer", seed=0) == "persistent/conf/m/d/transfer/seed0.parquet"
    assert fill(ITEMS) == ITEMS


def test_a_field_the_template_lacks_is_an_error():
    with pytest.raises(KeyError, match=r"has no field \['ckpt'\]"):
        fill(ITEMS, dataset="d", ckpt="c")
