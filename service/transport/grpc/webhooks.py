"""gRPC servicer of the webhook service: convert, call ``engine.webhooks``; each write answers its
consistency token (transport/consistency.py)."""

from __future__ import annotations

from mnemosyne.engine.engine import Engine
from mnemosyne.transport import convert, convert_webhooks
from mnemosyne.transport.call import Call, reading
from mnemosyne.transport.consistency import for_write, writing
from mnemosyne.v1 import webhooks_pb2, webhooks_pb2_grpc


class WebhookServicer(webhooks_pb2_grpc.WebhookServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self._webhooks = engine.webhooks
        self._clock = engine.deliveries.now
        self._tokens = engine.consistency

    @writing
    def CreateWebhook(
        self, request: webhooks_pb2.CreateWebhookRequest, call: Call
    ) -> webhooks_pb2.CreateWebhookResponse:
        made = self._webhooks.create(
            request.tenant,
            request.url,
            convert_webhooks.from_kinds(request.kinds),
            include_text=request.include_text,
            secrets=list(request.secrets),
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert_webhooks.to_create_response(made), token)

    @reading
    def ListWebhooks(self, request: webhooks_pb2.ListWebhooksRequest, call: Call) -> webhooks_pb2.ListWebhooksResponse:
        return convert_webhooks.to_list_response(self._webhooks.list(request.tenant))

    @writing
    def DeleteWebhook(
        self, request: webhooks_pb2.DeleteWebhookRequest, call: Call
    ) -> webhooks_pb2.DeleteWebhookResponse:
        deleted = self._webhooks.delete(request.tenant, request.webhook_id)
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert_webhooks.to_delete_response(deleted), token)

    @writing
    def RotateWebhookSecret(
        self, request: webhooks_pb2.RotateWebhookSecretRequest, call: Call
    ) -> webhooks_pb2.RotateWebhookSecretResponse:
        made = self._webhooks.rotate(
            request.tenant, request.webhook_id, secret=request.secret, retire=list(request.retire_secret_ids)
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert_webhooks.to_rotate_response(made), token)

    @writing
    def ResumeWebhook(
        self, request: webhooks_pb2.ResumeWebhookRequest, call: Call
    ) -> webhooks_pb2.ResumeWebhookResponse:
        webhook = self._webhooks.resume(request.tenant, request.webhook_id, self._clock())
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert_webhooks.to_resume_response(webhook), token)

    @reading
    def ListWebhookDeliveries(
        self, request: webhooks_pb2.ListWebhookDeliveriesRequest, call: Call
    ) -> webhooks_pb2.ListWebhookDeliveriesResponse:
        page = self._webhooks.deliveries(
            request.tenant, request.webhook_id, page_size=request.page_size, page_token=request.page_token
        )
        return convert_webhooks.to_deliveries_response(page)
