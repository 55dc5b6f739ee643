"""The firewall: ipfw-style rules compiled into bit-vector classifiers, lookup tables and
dynamic states, all in flat numpy arrays for the compiled data path.

- :mod:`.rules`: the rule syntax (parser, canonical text)
- :mod:`.config`: the ``[firewall]`` configuration section
- :mod:`.tables`: addr / number / iface tables
- :mod:`.layout`: the ``FW`` tuple of arrays and the codes in them
- :mod:`.classify`: the data path, the ``fw_batch`` / ``fw_classify`` kernels (API doc)
- :mod:`.lowering`: one rule -> conditions on the indexed fields + a residual program
- :mod:`.compiler`: ``compile_rules``, the classifier arrays from scratch
- :mod:`.incremental`: ``insert_rule`` / ``delete_rule_at`` on a copy
- :mod:`.states`: the dynamic state table
- :mod:`.keys`: the key matrix columns and ``extract_keys``
- :mod:`.firewall`: :class:`Firewall`, the per-worker object that ties them together
- :mod:`.show`: ``ipfw show``-style text
- :mod:`.classbench`: ClassBench rule sets -> vecroute rules
"""
