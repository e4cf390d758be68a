"""The protocol-agnostic failover layer: failover URLs, broker policies, back-off, the gate that
holds calls while the connection is restored, epochs and the ordered restore of resources.

Nothing here knows AMQP; ``haclient.aio`` supplies the connector. (To come.)
"""
