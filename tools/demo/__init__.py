"""The demo external service (``tools.demo.service``) and the tools that call it
(``tools.demo.tools``)."""
