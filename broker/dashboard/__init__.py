"""The broker's read-only dashboard: a page and its JSON documents on the /metrics port.

`views` computes each document from the broker's tables (on the event loop); `http` routes the
port's requests and hands the views to the loop; `static/` holds the page (plain HTML, one
script, one style sheet; no build step, nothing fetched from elsewhere).
"""
