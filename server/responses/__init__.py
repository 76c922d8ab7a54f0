"""The Responses API (``/v1/responses``) on the chat request plan.

A Responses request is translated into a chat request (:mod:`.translate`), prepared and run
by :mod:`server.chat.service` exactly as chat is, and its answer framed as Response output
items and events (:mod:`.service`). Stored responses live in a bounded store (:mod:`.store`).
"""
