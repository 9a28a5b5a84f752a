"""Share partitions (KIP-932): the in-flight records of a share group on a topic partition this
broker leads, their acquisition locks and delivery counts, and ShareFetch/ShareAcknowledge."""
