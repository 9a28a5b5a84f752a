"""The KRaft controller role (issue 30): a node with ``process.roles=controller`` runs a Raft
voter of the metadata quorum and serves its CONTROLLER listener (`node`, `apis`)."""
