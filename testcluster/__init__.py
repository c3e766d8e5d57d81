"""The test cluster: a Kubernetes cluster on this machine, and what the test trees need to use it.

``tests/``, ``e2e/`` and ``benchmarks/`` import this package (and ``finishable``), never each
other (``tests/test_architecture.py`` checks it); this package imports none of them.

* ``apiserver/``: the Kubernetes API emulator (``emulator.py``: kmock's emulator extended to
  answer as a real API server does, served over HTTP from a thread) and its parts: query
  parameters (``params.py``), CRD structural schemas (``schema.py``), users (``identity.py``),
  RBAC and owner-reference enforcement (``rbac.py``), ServiceAccount admission and TokenRequest
  (``admission.py``), what kubectl asks (``kubectl.py``);
* ``localcluster/``: the local cluster on that emulator: a kubelet running pods as docker
  containers of the image or as sandboxed processes, the StatefulSet, Deployment and ReplicaSet
  controllers, the chart installed as helm renders it (the operator is its Deployment's pod),
  Prometheus and an S3 object store; ``python -m testcluster`` starts it (``__main__.py``);
* ``client.py``: a cluster as the e2e suite and the benchmarks drive it (the local one or any
  kubeconfig's), and the example manifests as they apply them;
* ``chart/``: the helm chart as tests read it: rendered by the real helm (``helm.py``), its
  Grafana dashboard (``dashboard.py``) and its RBAC rules as grants (``rbac.py``);
* ``waiting.py`` (``wait_for``), ``network.py`` (a free port), ``processes.py``, ``tools.py``
  (helm, kubectl, prometheus... found or failed with the command that installs them),
  ``image.py`` (the project's image, built as ``make image`` builds it) and ``batchlog.py`` (a
  batch job's event log read as the crash tests judge it);
* ``tests/``: this package's own tests.
"""
