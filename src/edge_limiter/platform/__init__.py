"""The only code that touches the Workers runtime (``js``, ``pyodide``, ``workers``).

It converts the runtime's request into the gateway's plain :class:`Request`, implements
the gateway's ports over bindings (Durable Object stubs, ``fetch``), and converts the
plain :class:`Response` back. No decision is made here.
"""
