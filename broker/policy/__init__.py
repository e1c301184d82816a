"""The policy stage: load a proposal with what the gate needs, run the pure gate, commit the
decision, publish the command (``stage`` and the features it uses)."""
