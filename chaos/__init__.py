"""The chaos test bed: brokers, faults and audits that prove haclient's failover under stress.

Test-only code. It may import anything in the project, but nothing in ``haclient`` or
``failover`` imports ``chaos``.
"""
