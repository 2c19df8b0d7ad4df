"""The `evalbench` command line's commands (`python -m pytest_evalbench`): authoring (`gen-metrics`,
`gen-scenarios`), `merge` of CI shards and `schemas`. Imports nothing, so a module of it costs only itself."""
