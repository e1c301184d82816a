"""The demo external service (``warrant.tools.demo.service``) and the tools that call it
(``warrant.tools.demo.tools``)."""
