"""Spark's reader options and the records a split hands Spark's parsers (no Spark, no I/O but
the listing's temporary directory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finishable.connectors.fileformats import (
    FileOptions,
    SourceOptionError,
    array_objects,
    csv_records,
    decode_text,
    json_records,
    records_array,
    split_lines,
)
from finishable.coordinator.files import (
    ListedFile,
    compression_of,
    glob_matches,
    list_files,
    plan_file_splits,
)

pytestmark = pytest.mark.quick


def test_options_take_sparks_names_in_any_case_and_spark_defaults() -> None:
    options = FileOptions.parse("csv", {"HEADER": True, "Delimiter": ";", "multiline": "TRUE"})
    assert options.options == {"header": "true", "sep": ";", "multiLine": "TRUE"}
    assert options.header and options.multi_line and options.whole_files
    plain = FileOptions.parse("csv", None)
    assert not plain.header and plain.mode == "PERMISSIVE" and not plain.whole_files
    assert plain.parser_options() == {"mode": "PERMISSIVE"}
    assert FileOptions.parse("csv", {"encoding": "utf-16"}).whole_files
    assert not FileOptions.parse("csv", {"encoding": "latin1"}).whole_files
    assert FileOptions.parse("json", {"lineSep": "\u0001"}).whole_files


def test_dropmalformed_becomes_permissive_with_a_column_the_source_filters_on() -> None:
    parser = FileOptions.parse("json", {"mode": "dropMalformed"}).parser_options()
    assert parser["mode"] == "PERMISSIVE"
    assert parser["columnNameOfCorruptRecord"] == "__finishable_malformed"


def test_an_option_of_another_format_is_refused_with_the_formats_options() -> None:
    with pytest.raises(SourceOptionError, match=r"'header' is not a json reader option \(known: "):
        FileOptions.parse("json", {"header": True})
    with pytest.raises(SourceOptionError, match=r"options\.quote: 'ab' is not a single character"):
        FileOptions.parse("csv", {"quote": "ab"})


def test_lines_end_as_hadoop_ends_them() -> None:
    assert split_lines("a\nb\r\nc\rd", None) == ["a", "b", "c", "d"]
    assert split_lines("a\n\nb\n", None) == ["a", "", "b"]
    assert split_lines("a|b|", "|") == ["a", "b"]
    assert decode_text(b"\xef\xbb\xbfa", "utf-8", file_start=True) == "a"
    assert decode_text(b"\xef\xbb\xbfa", "utf-8", file_start=False) == "\ufeffa"
    assert decode_text(b"\xff", "utf-8", file_start=False) == "\ufffd"


def test_csv_records_drop_blank_lines_comments_and_the_files_header() -> None:
    options = FileOptions.parse("csv", {"header": True, "comment": "#"})
    text = "\n# c\nh1,h2\n1,a\n \t\n#2,b\n3,c\n"
    assert csv_records(text, options, file_start=True) == ["1,a", "3,c"]
    assert csv_records(text, options, file_start=False) == ["h1,h2", "1,a", "3,c"]


def test_multiline_csv_joins_the_lines_of_an_open_quote() -> None:
    options = FileOptions.parse("csv", {"multiLine": True})
    text = '1,"a\nb"\n2,"say \\"x\n",y\n3,"""q"""\n4,"open\n\nstill"\n'
    assert csv_records(text, options, file_start=True) == [
        '1,"a\nb"',
        '2,"say \\"x\n",y',
        '3,"""q"""',
        '4,"open\n\nstill"',
    ]


def test_json_arrays_of_objects_are_a_record_per_object() -> None:
    assert array_objects('[{"a": 1}, {"b": "],{"}]  trailing') == ['{"a": 1}', '{"b": "],{"}']
    assert array_objects("[]") == []
    assert array_objects("[1, 2]") is None
    assert array_objects('[{"a": 1},]') is None
    assert array_objects('[{"a": "\\"]"}') is None  # never closed
    lines = FileOptions("json")
    assert json_records('{"a":1}\n\n[{"b":2},{"c":3}]\n[]\n[4]\n', lines) == [
        '{"a":1}',
        '{"b":2}',
        '{"c":3}',
        "[4]",
    ]
    whole = FileOptions.parse("json", {"multiLine": True})
    assert json_records('[\n {"a": 1},\n {"a": 2}\n]', whole) == ['{"a": 1}', '{"a": 2}']


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.text(max_size=4), st.text(max_size=6) | st.integers(), max_size=3),
        max_size=5,
    )
)
def test_array_objects_returns_each_object_as_json_parses_it(
    objects: list[dict[str, object]],
) -> None:
    elements = array_objects(json.dumps(objects))
    assert elements is not None
    assert [json.loads(element) for element in elements] == objects


def _tree(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")


def test_listing_finds_what_sparks_file_index_finds(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        ["a.csv", "b.txt", "_SUCCESS", ".a.crc", "sub/c.csv", "k=1/d.csv", "k=1/j=2/e.csv"],
    )

    def names(**kw: object) -> list[str]:
        listed = list_files(tmp_path.as_uri(), bounded=True, **kw)  # type: ignore[arg-type]
        return [item.url.rsplit(str(tmp_path), 1)[1] for item in listed]

    assert names(recursive=False) == ["/a.csv", "/b.txt", "/k%3D1/d.csv", "/k%3D1/j%3D2/e.csv"]
    assert names(recursive=True) == [
        "/a.csv",
        "/b.txt",
        "/k%3D1/d.csv",
        "/k%3D1/j%3D2/e.csv",
        "/sub/c.csv",
    ]
    assert names(recursive=True, name_glob="*.{csv,tsv}") == [
        "/a.csv",
        "/k%3D1/d.csv",
        "/k%3D1/j%3D2/e.csv",
        "/sub/c.csv",
    ]
    assert glob_matches("x.tsv", "*.{csv,tsv}") and not glob_matches("x.txt", "*.{csv,tsv}")


def test_compressed_files_are_never_cut_into_ranges() -> None:
    assert compression_of("s3://b/x.csv.GZ?endpoint_override=h") == "gzip"
    assert compression_of("/x.csv") is None
    files = [ListedFile("file:///a.csv.bz2", 1000), ListedFile("file:///b.csv", 1000)]
    splits = plan_file_splits(files, 300)
    assert [(s.url, s.whole_file) for s in splits][:2] == [
        ("file:///a.csv.bz2", True),
        ("file:///b.csv", False),
    ]
    assert len(splits) == 1 + 4


_LINE = st.text(alphabet=st.sampled_from(list('ab ,"#[]{}\t\r\n\x00é')), max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_LINE, max_size=12),
    file_start=st.booleans(),
    bom=st.booleans(),
    file_format=st.sampled_from(["csv", "json"]),
    header=st.booleans(),
    comment=st.booleans(),
)
def test_the_vectorised_records_are_the_reference_records(
    *, lines: list[str], file_start: bool, bom: bool, file_format: str, header: bool, comment: bool
) -> None:
    given_options: dict[str, object] = {}
    if file_format == "csv":
        given_options = {"header": header, **({"comment": "#"} if comment else {})}
    options = FileOptions.parse(file_format, given_options)
    data = ("\ufeff" if bom else "").encode() + "\n".join(lines).encode("utf-8")
    text = decode_text(data, "utf-8", file_start=file_start)
    if file_format == "csv":
        reference = csv_records(text, options, file_start=file_start)
    else:
        reference = json_records(text, options)
    assert records_array(data, options, file_start=file_start).to_pylist() == reference


def test_invalid_utf8_is_decoded_with_replacement_characters_as_spark_does() -> None:
    records = records_array(b"1,\xff\n2,b\n", FileOptions("csv"), file_start=True)
    assert records.to_pylist() == ["1,\ufffd", "2,b"]
