"""The firewall: ipfw-style rules compiled into bit-vector classifiers, lookup tables and
dynamic states, all in flat numpy arrays for the compiled data path.

- :mod:`.rules`: the rule syntax (parser, canonical text)
- :mod:`.config`: the ``[firewall]`` configuration section
- :mod:`.tables`: addr / number / iface tables
- :mod:`.classifier`: the compiler and the ``fw_batch`` / ``fw_classify`` kernels (API doc)
- :mod:`.states`: the dynamic state table
- :mod:`.keys`: the key matrix columns and ``extract_keys``
- :mod:`.firewall`: :class:`Firewall`, the per-worker object that ties them together
- :mod:`.show`: ``ipfw show``-style text
- :mod:`.classbench`: ClassBench rule sets -> vecroute rules
"""
