"""``spec.application``: the program, its arguments, its Spark settings and what it depends on.

The dependencies are written as Spark and Kubeflow's spark-operator take them: URLs of Python
files, files, archives and jars (``spark.submit.pyFiles``, ``spark.files``, ``spark.archives``,
``spark.jars``), Maven coordinates for Spark's resolver (``spark.jars.packages``) and the
repositories it searches, plus the sha256 a fetched file must have. The rules here are the ones a
manifest can break without fetching anything, each problem naming the entry
(``spec.application.archives[1]``); the driver fetches them before the program starts
(:mod:`finishable.driver.dependencies.prepare`, docs/dependencies.md).
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from finishable.api.models import ApiModel
from finishable.api.rules import (
    Binary,
    Expr,
    Not,
    Path,
    Rule,
    all_of,
    any_of,
    field,
    has,
    implies,
    lit,
)
from finishable.api.volumes import driver_volumes

URL_SCHEMES = ("local", "file", "s3", "s3a", "gs", "hdfs", "http", "https")
"""What the program and its dependencies may be fetched from (a plain path is a local file)."""
REPOSITORY_SCHEMES = ("http", "https", "file")
"""What Spark's resolver (Ivy) reads a Maven repository over."""
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar", ".jar")
"""The archives Spark unpacks (``Utils.unpack``)."""
PY_FILE_SUFFIXES = (".py", ".zip", ".egg")
"""What Spark puts on the Python workers' path from ``spark.submit.pyFiles``."""
DEPENDENCY_FIELDS = ("file", "pyFiles", "files", "archives", "jars")
"""The fields whose URLs ``sha256`` may name."""

MAX_URL_LENGTH = 2048
MAX_URLS = 64
MAX_PACKAGES = 64
MAX_COORDINATE_LENGTH = 256
MAX_REPOSITORIES = 16
_COORDINATE = re.compile(r"[A-Za-z0-9_.\-]+:[A-Za-z0-9_.\-]+:[A-Za-z0-9_.\-+]+")
_ALIAS = re.compile(r"[A-Za-z0-9_.\-]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def scheme_of(url: str) -> str:
    """The URL's scheme, '' for a plain path (a Windows drive letter is no scheme)."""
    scheme = urlsplit(url).scheme
    return scheme if len(scheme) > 1 else ""


def without_alias(url: str) -> str:
    """An archive's URL without Spark's ``#alias`` fragment: the key ``sha256`` names it by."""
    return url.partition("#")[0]


def alias_of(url: str) -> str | None:
    """An archive's ``#alias``: the directory Spark unpacks it into (its file name if none)."""
    _, hash_sign, alias = url.partition("#")
    return alias if hash_sign else None


def file_name(url: str) -> str:
    """The file a URL names, as Spark calls it in ``SparkFiles`` (query and fragment dropped)."""
    return posixpath.basename(urlsplit(without_alias(url)).path)


def redacted(url: str) -> str:
    """The URL with a password in it masked, for logs and messages (``s3://key:***@bucket``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _either(words: tuple[str, ...], last: str = "or") -> str:
    return f"{', '.join(words[:-1])} {last} {words[-1]}" if len(words) > 1 else words[0]


def _known_scheme(value: str) -> str:
    scheme = scheme_of(value)
    if scheme and scheme not in URL_SCHEMES:
        raise ValueError(
            f"{value!r} has the unknown scheme {scheme!r}; use one of {', '.join(URL_SCHEMES)} "
            "or a plain path"
        )
    return value


def _names_a_file(value: str) -> str:
    if not file_name(value):
        raise ValueError(f"{value!r} names no file (it ends with '/')")
    if "," in value:
        raise ValueError(f"{value!r} holds a ',', which separates the entries of Spark's lists")
    return value


def _no_alias(value: str) -> str:
    if "#" in value:
        raise ValueError(
            f"{value!r} has a '#' fragment; only archives take one (the directory Spark "
            "unpacks them into)"
        )
    return value


def _py_file(value: str) -> str:
    if not file_name(value).lower().endswith(PY_FILE_SUFFIXES):
        raise ValueError(
            f"{value!r} is not something Python imports from: use a .py, .zip or .egg file "
            "(a pure wheel is a zip: name it .zip; a wheel with compiled code belongs in an "
            "archives environment)"
        )
    return value


def _archive(value: str) -> str:
    alias = alias_of(value)
    if alias is not None and (not _ALIAS.fullmatch(alias) or alias in (".", "..")):
        raise ValueError(
            f"{value!r}: the alias {alias!r} must be a directory name of letters, digits, "
            "'.', '_' or '-' (for example s3://bucket/env.tar.gz#env)"
        )
    if not file_name(value).lower().endswith(ARCHIVE_SUFFIXES):
        raise ValueError(
            f"{value!r} is not an archive Spark unpacks: use a {_either(ARCHIVE_SUFFIXES)} file"
        )
    return value


def _coordinate(value: str) -> str:
    if not _COORDINATE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Maven coordinate: write groupId:artifactId:version, for "
            "example org.apache.spark:spark-avro_2.13:4.0.0"
        )
    return value


def _repository(value: str) -> str:
    if scheme_of(value) not in REPOSITORY_SCHEMES:
        raise ValueError(
            f"{value!r} is not a repository URL Spark's resolver reads: write "
            f"{_either(REPOSITORY_SCHEMES)} URLs, such as https://host/maven2 or file:///path"
        )
    return value


def _digest(value: str) -> str:
    digest = value.lower()
    if not _SHA256.fullmatch(digest):
        raise ValueError(
            f"{value!r} is not a sha256 digest: 64 hexadecimal digits, as sha256sum prints them"
        )
    return digest


_Url = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_URL_LENGTH),
    AfterValidator(_known_scheme),
    AfterValidator(_names_a_file),
]
FileUrl = Annotated[_Url, AfterValidator(_no_alias)]
PyFileUrl = Annotated[FileUrl, AfterValidator(_py_file)]
ArchiveUrl = Annotated[_Url, AfterValidator(_archive)]
Coordinate = Annotated[
    str,
    StringConstraints(max_length=MAX_COORDINATE_LENGTH),
    Field(json_schema_extra={"pattern": f"^{_COORDINATE.pattern}$"}),  # the API server's check
    AfterValidator(_coordinate),
]
RepositoryUrl = Annotated[
    str, StringConstraints(max_length=MAX_URL_LENGTH), AfterValidator(_repository)
]
Sha256 = Annotated[
    str,
    StringConstraints(max_length=64),
    Field(json_schema_extra={"pattern": "^[0-9a-fA-F]{64}$"}),
    AfterValidator(_digest),
]


def _listed(key: Path) -> Expr:
    """``key`` is the URL of ``file`` or of an entry of the dependency lists (an archive's
    without its ``#alias``)."""

    def in_list(name: str) -> Expr:
        return all_of(has(field(name)), key.is_in(field(name)))

    archive = all_of(
        has(field("archives")),
        field("archives").exists(
            lambda url: any_of(
                all_of(url.eq(key), Not(key.matches("#"))),
                url.starts_with(Binary("+", key, lit("#"))),
            )
        ),
    )
    return any_of(
        key.eq(field("file")), in_list("pyFiles"), in_list("files"), archive, in_list("jars")
    )


class ApplicationSpec(ApiModel):
    """The PySpark program the driver runs, and what it depends on."""

    RULES = (
        Rule(
            implies(has(field("sha256")), field("sha256").all(_listed)),
            (
                field("sha256").filter(lambda key: Not(_listed(key))).first(),
                " is not the URL of file nor of an entry of "
                f"{_either(DEPENDENCY_FIELDS[1:])}: a key must be a URL exactly as written "
                "there (an archive's without its #alias)",
            ),
            field=".sha256",
        ),
    )

    file: str = Field(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        description=(
            "The PySpark program: local:///path inside the image, a path relative to the "
            "manifest for `finishable run`, or a URL (file, s3, s3a, gs, hdfs, http, https)."
        ),
    )
    args: list[str] = Field(
        default_factory=list, description="Arguments passed to the program after its file name."
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra Spark configuration (spark.* keys). Settings the operator derives from this "
            "resource (master, memory, cores, instances) take precedence."
        ),
    )
    py_files: list[PyFileUrl] = Field(
        default_factory=list,
        max_length=MAX_URLS,
        description=(
            "Python files the program and its Spark tasks import from (.py, .zip, .egg), as "
            "spark.submit.pyFiles: local:///path in the image, a path or file:// URL (on the "
            "driver; relative to the manifest for `finishable run`), or http, https, s3, s3a, "
            "gs, hdfs. The driver fetches them before the program starts and puts them on its "
            "Python path; Spark hands them to the executors."
        ),
    )
    files: list[FileUrl] = Field(
        default_factory=list,
        max_length=MAX_URLS,
        description=(
            "Files for the program and its tasks, as spark.files: fetched by the driver, "
            "handed to every executor by Spark, read with SparkFiles.get(name). URLs as in "
            "pyFiles."
        ),
    )
    archives: list[ArchiveUrl] = Field(
        default_factory=list,
        max_length=MAX_URLS,
        description=(
            "Archives (.zip, .tar.gz, .tgz, .tar, .jar), as spark.archives: unpacked in each "
            "executor's working directory under the name after '#' (s3://bucket/env.tar.gz#env; "
            "the file name without one). An archive holding a Python environment "
            "(lib/python3.X/site-packages, a packed virtualenv or conda env of the image's "
            "Python version) goes first on the Python path of the program and of every task."
        ),
    )
    jars: list[FileUrl] = Field(
        default_factory=list,
        max_length=MAX_URLS,
        description=(
            "Jars for the driver's and the executors' classpath, as spark.jars. A local:// jar "
            "is read from the image on every pod; the others are fetched by the driver and "
            "handed to the executors by Spark."
        ),
    )
    packages: list[Coordinate] = Field(
        default_factory=list,
        max_length=MAX_PACKAGES,
        description=(
            "Maven coordinates (groupId:artifactId:version) Spark's resolver fetches with their "
            "dependencies, as spark.jars.packages: from the local Maven and Ivy caches, Maven "
            "Central, then repositories. Cached on the work volume when the job has one."
        ),
    )
    repositories: list[RepositoryUrl] = Field(
        default_factory=list,
        max_length=MAX_REPOSITORIES,
        description=(
            "More Maven repositories for packages (https://host/path, file:///path), as "
            "spark.jars.repositories; searched after Spark's default ones."
        ),
    )
    sha256: dict[str, Sha256] = Field(
        default_factory=dict,
        max_length=MAX_URLS * 4 + 1,
        description=(
            "The sha256 digest (64 hex digits) each named file must have: keys are URLs exactly "
            "as written in file, pyFiles, files, archives (without the #alias) or jars. A file "
            "that differs fails the job at once, naming the URL and both digests; a verified "
            "file is fetched once and reused by later driver attempts."
        ),
    )

    @field_validator("file")
    @classmethod
    def _program_scheme(cls, value: str) -> str:
        return _known_scheme(value)

    @field_validator("spark_conf")
    @classmethod
    def _spark_keys(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [key for key in value if not key.startswith("spark.")]
        if bad:
            raise ValueError(
                f"keys must start with 'spark.'; got {', '.join(repr(key) for key in bad)}"
            )
        driver_volumes(value)  # a VolumeConfError (a ValueError) names the key
        return value

    def entries(self) -> list[tuple[str, str]]:
        """Every URL of pyFiles, files, archives and jars with the entry it is (``archives[1]``),
        in that order."""
        lists = (
            ("pyFiles", self.py_files),
            ("files", self.files),
            ("archives", self.archives),
            ("jars", self.jars),
        )
        return [(f"{name}[{index}]", url) for name, urls in lists for index, url in enumerate(urls)]

    @model_validator(mode="after")
    def _distinct_names(self) -> Self:
        """Two dependencies Spark would put under one name in a task's directory are refused:
        one would silently replace the other (or Spark refuses the second)."""
        seen: dict[str, str] = {}
        for where, url in self.entries():
            if scheme_of(url) == "local" and where.startswith("jars["):
                continue  # read from the image on every pod: never copied into a task's dir
            name = alias_of(url) or file_name(url)
            if name in seen:
                raise ValueError(
                    f"{seen[name]} and {where} are both named {name!r} in the executors' "
                    "working directory; rename one (an archive: give it another #alias)"
                )
            seen[name] = where
        return self
