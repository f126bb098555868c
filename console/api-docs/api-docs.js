// The API reference at /docs/: Swagger UI (npm's swagger-ui-dist, vendored by build-docs.mjs)
// renders this server's own /openapi.json. A file of its own: the page's policy runs no inline
// script. No validator badge (it would ask an outside service about the document).
window.addEventListener("DOMContentLoaded", () => {
  window.SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#reference",
    deepLinking: true,
    validatorUrl: null,
    persistAuthorization: false,
  });
});
