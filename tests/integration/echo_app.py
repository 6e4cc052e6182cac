"""A minimal Faust app for the foundation's integration test: one agent, topic in → topic out.

Built with Switchyard's own ``create_app`` so the test covers the real settings path.
Configured by the environment: ECHO_IN, ECHO_OUT, ECHO_APP_ID.
"""

import os

from app.main import create_app
from app.settings import Settings

settings = Settings()
app = create_app(settings, app_id=os.environ["ECHO_APP_ID"])
source = app.topic(os.environ["ECHO_IN"], key_type=str, key_serializer="raw",
                   value_serializer="raw", partitions=1)
sink = app.topic(os.environ["ECHO_OUT"], key_type=str, key_serializer="raw",
                 value_serializer="raw", partitions=1)


@app.agent(source)
async def echo(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.items():
        await sink.send(key=key, value=value.upper())


if __name__ == "__main__":
    app.main()
