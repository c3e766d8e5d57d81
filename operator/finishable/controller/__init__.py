"""The kopf operator, by the resource it reconciles: the job (``job/``) and the snapshot resource
(``snapshot/``); beside them what both share (names, pod parts, API calls, metrics, the status
writer, settings) and the process that registers both (``handlers``, ``main``)."""
