"""What a user adds to a job's pods (a pod template and the typed shorthands: env, envFrom,
volumes, volumeMounts, initContainers, sidecars), and what of each pod the operator owns.

Kubernetes' own shapes are reused (a ``PodTemplateSpec``, ``EnvVar``, ``Volume``, ``Container``):
the fields the operator reads or guards are declared here, so that the schema checks them and the
cross-field rules (CEL in the CRD, the same rules in Python) can read them; every other field of
those objects passes through to the pod as written. The rules refuse, before anything runs, a
template or a typed field that sets what the operator owns (:class:`OwnedParts`): its container's
command, image, ports, CPU and memory, its volumes and where they are mounted, the
``finishable.dev/`` labels and the ``FINISHABLE_`` environment. docs/your-own-job.md has the
precedence: the template, then the typed fields, then what the operator owns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import ConfigDict, Field, WithJsonSchema

from finishable.api.models import ApiModel
from finishable.api.rules import Expr, Not, Path, Rule, all_of, any_of, field, has, implies, lit

KubeObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""A Kubernetes object passed through to the pods as written (a toleration, an affinity)."""

IntOrString = Annotated[int | str, WithJsonSchema({"x-kubernetes-int-or-string": True})]
"""A resource quantity as Kubernetes takes one: ``2``, ``"500m"``, ``"4Gi"``."""

# -- the operator's names inside its pods --------------------------------------------------------

DRIVER = "driver"
EXECUTOR = "executor"
SHUFFLE = "shuffle"
CONFIG_DIR = "/etc/finishable"
CONFIG_VOLUME = "config"
WORK_DIR = "/tmp/finishable"
WORK_DIR_VOLUME = "work"
WORK_VOLUME = "finishable-work"  # the volume name of spec.workVolume, in driver and executors
WORK_VOLUME_DIR = "/var/lib/finishable"
SHUFFLE_DATA_DIR = "/data"
SHUFFLE_DATA_VOLUME = "data"
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
UI_PORT = 4040
SHUFFLE_PORT = 7337
OWNED_LABEL_PREFIX = "finishable.dev/"
OWNED_ENV_PREFIX = "FINISHABLE_"

NAME_MAX = 253
ENV_MAX = 128
LIST_MAX = 64
CONTAINERS_MAX = 16
LABELS_MAX = 64


class KubeModel(ApiModel):
    """A Kubernetes object: the fields declared are checked, any other passes through."""

    model_config = ConfigDict(extra="allow")


class EnvVar(ApiModel):
    """An environment variable (Kubernetes' ``EnvVar``): a value, or one from a Secret,
    ConfigMap or field (``valueFrom``)."""

    name: str = Field(min_length=1, max_length=NAME_MAX, description="The variable's name.")
    value: str | None = Field(default=None, description="Its value (not for secrets).")
    value_from: KubeObject | None = Field(
        default=None,
        description="Where its value comes from: secretKeyRef, configMapKeyRef, fieldRef, ...",
    )


class VolumeMount(KubeModel):
    """Where a container mounts a volume (Kubernetes' ``VolumeMount``: readOnly, subPath...)."""

    name: str = Field(min_length=1, max_length=63, description="The volume's name.")
    mount_path: str = Field(min_length=1, max_length=1024, description="Where it is mounted.")


class Volume(KubeModel):
    """A pod volume (Kubernetes' ``Volume``): any volume source (secret, configMap, projected,
    csi, ephemeral, persistentVolumeClaim, emptyDir, ...) beside its name."""

    name: str = Field(min_length=1, max_length=63, description="The volume's name.")


class ContainerPort(KubeModel):
    """A port a container exposes."""

    container_port: int = Field(ge=1, le=65535, description="The port number.")
    name: str | None = Field(default=None, max_length=15, description="Its name.")


class Resources(KubeModel):
    """A container's requests and limits (Kubernetes' ``ResourceRequirements``)."""

    requests: dict[str, IntOrString] | None = Field(
        default=None, max_length=LIST_MAX, description="Requested resources."
    )
    limits: dict[str, IntOrString] | None = Field(
        default=None, max_length=LIST_MAX, description="Resource limits."
    )


class Container(KubeModel):
    """A container (Kubernetes' ``Container``); fields not declared here pass through."""

    name: str = Field(min_length=1, max_length=63, description="The container's name.")
    image: str | None = Field(default=None, max_length=1024, description="Its image.")
    command: list[str] | None = Field(default=None, description="Its entrypoint.")
    args: list[str] | None = Field(default=None, description="Its arguments.")
    env: list[EnvVar] = Field(default_factory=list, max_length=ENV_MAX, description="Its env.")
    env_from: list[KubeObject] = Field(
        default_factory=list, max_length=LIST_MAX, description="Env from Secrets and ConfigMaps."
    )
    ports: list[ContainerPort] = Field(
        default_factory=list, max_length=LIST_MAX, description="Its ports."
    )
    resources: Resources | None = Field(default=None, description="Its requests and limits.")
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list, max_length=LIST_MAX, description="Its volume mounts."
    )
    restart_policy: str | None = Field(
        default=None,
        max_length=16,
        description="Of an init container: Always makes it a sidecar that runs beside the pod.",
    )


class TemplateMetadata(ApiModel):
    """The labels and annotations of a pod template (the operator names the pods)."""

    labels: dict[str, str] = Field(
        default_factory=dict, max_length=LABELS_MAX, description="Labels of the pods."
    )
    annotations: dict[str, str] = Field(
        default_factory=dict, max_length=LABELS_MAX, description="Annotations of the pods."
    )


class TemplatePodSpec(KubeModel):
    """A pod spec (Kubernetes' ``PodSpec``); fields not declared here pass through."""

    containers: list[Container] = Field(
        default_factory=list,
        max_length=CONTAINERS_MAX,
        description="The main container (named as the pod's component) and, where allowed, more.",
    )
    init_containers: list[Container] = Field(
        default_factory=list, max_length=CONTAINERS_MAX, description="Init containers."
    )
    volumes: list[Volume] = Field(default_factory=list, max_length=LIST_MAX, description="Volumes.")
    restart_policy: str | None = Field(
        default=None, max_length=16, description="The operator's: not settable here."
    )
    termination_grace_period_seconds: int | None = Field(
        default=None, description="The driver's comes from spec.driver.terminationGracePeriod."
    )


class PodTemplate(ApiModel):
    """A ``PodTemplateSpec``: any field of a pod, under the typed fields and the operator's."""

    metadata: TemplateMetadata | None = Field(default=None, description="Labels, annotations.")
    spec: TemplatePodSpec | None = Field(default=None, description="The pod spec.")


# -- what the operator owns, and the rules that keep users off it ---------------------------------


@dataclass(frozen=True)
class OwnedParts:
    """What the operator sets in the pods of one component; templates and typed fields that
    set any of it are refused."""

    container: str
    """The main container's name: the template's container of this name is merged into it."""
    volumes: tuple[str, ...]
    mount_paths: tuple[str, ...]
    ports: tuple[int, ...]
    env: tuple[str, ...]
    """Variables beyond the ``FINISHABLE_`` ones."""
    pod_fields: tuple[str, ...]
    """Pod spec fields the template may not set."""
    only_main: bool
    """No other container in ``template.spec.containers``: the pod's phase is the main
    container's (a driver pod must end when its driver does; sidecars stop with it)."""


DRIVER_PARTS = OwnedParts(
    container=DRIVER,
    volumes=(CONFIG_VOLUME, WORK_DIR_VOLUME, WORK_VOLUME),
    mount_paths=(CONFIG_DIR, WORK_DIR, WORK_VOLUME_DIR),
    ports=(DRIVER_PORT, BLOCK_MANAGER_PORT, UI_PORT),
    env=("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS", "POD_NAMESPACE"),
    pod_fields=("restartPolicy", "terminationGracePeriodSeconds"),
    only_main=True,
)
EXECUTOR_PARTS = OwnedParts(
    container=EXECUTOR,
    volumes=(WORK_VOLUME,),
    mount_paths=(WORK_VOLUME_DIR,),
    ports=(BLOCK_MANAGER_PORT,),
    env=(),
    pod_fields=("restartPolicy",),
    only_main=False,
)
SHUFFLE_PARTS = OwnedParts(
    container=SHUFFLE,
    volumes=(SHUFFLE_DATA_VOLUME,),
    mount_paths=(SHUFFLE_DATA_DIR,),
    ports=(SHUFFLE_PORT,),
    env=(),
    pod_fields=("restartPolicy",),
    only_main=False,
)


def _first(items: Expr, bad: Callable[[Path], Expr], of: str = "") -> Expr:
    """The first offending item (its field ``of``), for a message."""
    offending = items.filter(bad)
    return offending.map(lambda item: item.at(of)).first() if of else offending.first()


def _none_bad(items: Path, bad: Callable[[Path], Expr]) -> Expr:
    return implies(has(items), items.all(lambda item: Not(bad(item))))


def _env_owned(parts: OwnedParts) -> Callable[[Path], Expr]:
    return lambda env: any_of(
        env.at("name").starts_with(OWNED_ENV_PREFIX), env.at("name").is_in(list(parts.env))
    )


def _forbid(items: Path, bad: Callable[[Path], Expr], subject: str, why: str, of: str) -> Rule:
    """No item of ``items`` is ``bad``: the message names the first that is (its ``of``)."""
    top = items.keys[0]
    where = "" if len(items.keys) == 1 else ".".join(items.keys) + ": "
    return Rule(
        _none_bad(items, bad),
        (f"{where}{subject} ", _first(items, bad, of), f": {why}"),
        field=f".{top}",
        reason="FieldValueForbidden",
    )


def _main_container_rule(
    containers: Path, main: str, holds: Callable[[Path], Expr], message: str
) -> Rule:
    """What holds of the template's main container (the one named ``main``)."""
    return Rule(
        implies(
            has(containers),
            containers.all(lambda c: implies(c.at("name").eq(main), holds(c))),
        ),
        (f"template.spec.containers[{main}]{message}",),
        field=".template",
        reason="FieldValueForbidden",
    )


def pod_rules(parts: OwnedParts) -> tuple[Rule, ...]:
    """The rules of a component's pod settings (``spec.driver``, ``spec.executor``,
    ``spec.shuffle``): nothing the operator owns is set by the user, and every mount names a
    volume."""
    main = parts.container
    containers = field("template.spec.containers")
    template_volumes = field("template.spec.volumes")
    env_owned = _env_owned(parts)
    owned_env = f"{OWNED_ENV_PREFIX}* variables" + (
        f" and {', '.join(parts.env)}" if parts.env else ""
    )
    owned_paths = f"{', '.join(parts.mount_paths)} hold the operator's volumes"
    owned_volumes = f"{', '.join(parts.volumes)} are the operator's volumes; use another name"
    label_why = f"{OWNED_LABEL_PREFIX}* labels are set by the operator"

    def is_main(container: Path) -> Expr:
        return container.at("name").eq(main)

    def owned_path(mount: Path) -> Expr:
        return mount.at("mountPath").is_in(list(parts.mount_paths))

    def owned_volume(volume: Path) -> Expr:
        return volume.at("name").is_in(list(parts.volumes))

    def owned_label(key: Path) -> Expr:
        return key.starts_with(OWNED_LABEL_PREFIX)

    def undeclared(mount: Path) -> Expr:
        def declared_in(volumes: Path) -> Expr:
            return all_of(has(volumes), volumes.exists(lambda v: v.at("name").eq(mount.at("name"))))

        return Not(any_of(declared_in(field("volumes")), declared_in(template_volumes)))

    def some(key: str, bad: Callable[[Path], Expr]) -> Callable[[Path], Expr]:
        """A container has an item of ``key`` that is ``bad``."""
        return lambda c: all_of(has(c.at(key)), c.at(key).exists(bad))

    def resource_free(container: Path) -> Expr:
        def free(kind: str) -> Expr:
            table = container.at(f"resources.{kind}")
            return implies(
                has(table), Not(any_of(lit("cpu").is_in(table), lit("memory").is_in(table)))
            )

        return all_of(free("requests"), free("limits"))

    rules = [
        _forbid(field("labels"), owned_label, "label", label_why, ""),
        _forbid(field("template.metadata.labels"), owned_label, "label", label_why, ""),
        _forbid(
            field("env"), env_owned, "variable", f"{owned_env} are set by the operator", "name"
        ),
        _forbid(field("volumes"), owned_volume, "volume", owned_volumes, "name"),
        _forbid(template_volumes, owned_volume, "volume", owned_volumes, "name"),
        _forbid(field("volumeMounts"), owned_path, "mount path", owned_paths, "mountPath"),
        _forbid(
            field("volumeMounts"),
            undeclared,
            "mount of volume",
            f"no such volume in spec.{main}.volumes or its template's",
            "name",
        ),
        _forbid(
            field("sidecars"),
            some("volumeMounts", undeclared),
            "container",
            f"mounts a volume that is in neither spec.{main}.volumes nor its template's",
            "name",
        ),
        *(
            _forbid(
                containers_field,
                is_main,
                "container",
                f"{main} is the main container: set it with the typed fields or the template",
                "name",
            )
            for containers_field in (
                field("sidecars"),
                field("initContainers"),
                field("template.spec.initContainers"),
            )
        ),
        _main_container_rule(
            containers,
            main,
            lambda c: Not(any_of(*(has(c.at(name)) for name in ("command", "args", "image")))),
            ": command, args and image are the operator's (the image is spec.image)",
        ),
        _main_container_rule(
            containers,
            main,
            resource_free,
            f".resources: cpu and memory come from spec.{main} (cores, memory, coreLimit, "
            "memoryOverhead); other resources (GPUs, ephemeral-storage) may be set here",
        ),
        _main_container_rule(
            containers,
            main,
            lambda c: Not(some("env", env_owned)(c)),
            f".env: {owned_env} are set by the operator",
        ),
        _main_container_rule(
            containers,
            main,
            lambda c: Not(
                some("ports", lambda port: port.at("containerPort").is_in(list(parts.ports)))(c)
            ),
            f".ports: {', '.join(str(port) for port in parts.ports)} are the operator's ports",
        ),
        _main_container_rule(
            containers,
            main,
            lambda c: Not(some("volumeMounts", owned_path)(c)),
            f".volumeMounts: {owned_paths}",
        ),
        *(
            Rule(
                Not(has(field(f"template.spec.{name}"))),
                (f"template.spec.{name} is set by the operator",),
                field=".template",
                reason="FieldValueForbidden",
            )
            for name in parts.pod_fields
        ),
    ]
    if parts.only_main:
        rules.append(
            _forbid(
                containers,
                lambda c: Not(is_main(c)),
                "container",
                f"a {main} pod must end when its {main} does: run other containers as "
                f"sidecars (spec.{main}.sidecars), which stop with it",
                "name",
            )
        )
    return tuple(rules)
