// The HTTP API. createApp() mounts each route by its contract (api/*.routes.ts, listed in
// api/openapi.ts) on its handlers; nothing here talks to Temporal except through the facade.
import express, { type NextFunction, type Request, type Response } from 'express';
import type { ApiContext } from './context';
import { readGate } from './admission';
import { corsForTokenRoutes, requireSecretKey, requireTenant } from './auth';
import { batchHandlers } from './batches.handlers';
import { batchRoutes } from './batches.routes';
import { callbackHandlers, writeCallbackAnswer } from './callbacks.handlers';
import { callbackRoutes } from './callbacks.routes';
import { budgetHandlers, budgetRoutes } from './budget.routes';
import { mountRoute } from './contract';
import { modelHandlers } from './models.handlers';
import { modelRoutes } from './models.routes';
import { apiDocument } from './openapi';
import { eventHandlers } from './events.handlers';
import { eventRoutes } from './events.routes';
import { errorHandler, problems, sendProblem } from './problem';
import { requestSpans, routeOf } from './request-span';
import { systemRoutes } from './system.routes';
import { CONSOLE_HTML } from './console.page';
import { taskHandlers } from './tasks.handlers';
import { tokenHandlers } from './tokens.handlers';
import { tokenRoutes } from './tokens.routes';
import { taskRoutes } from './tasks.routes';
import { webhookHandlers } from './webhooks.handlers';
import { usageHandlers } from './usage.handlers';
import { usageRoutes } from './usage.routes';
import { webhookEndpointRoutes } from './webhooks.routes';
import { unstorableTextAt } from '../db/storable';

export function createApp(ctx: ApiContext): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  app.use(requestSpans());

  app.use((req: Request, res: Response, next: NextFunction) => {
    const end = ctx.metrics.httpDuration.startTimer({ method: req.method });
    res.on('finish', () => {
      const route = routeOf(req);
      end({ route });
      ctx.metrics.httpRequests.inc({ method: req.method, route, status: String(res.statusCode) });
    });
    next();
  });

  // A provider's callbacks: the raw bytes (the signature is checked on them), up to API_BODY_LIMIT.
  const callbacks = callbackHandlers(ctx);
  mountRoute(app, '', callbackRoutes.receive, express.raw({ type: () => true, limit: ctx.settings.bodyLimit }), async (req: Request, res: Response) => {
    const answer = await callbacks.receive({
      provider: String(req.params['provider']),
      token: String(req.params['token']),
      headers: req.headers,
      body: Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0),
      source: req.ip ?? req.socket.remoteAddress ?? 'unknown',
    });
    writeCallbackAnswer(res, answer);
  });
  mountRoute(app, '', systemRoutes.healthz, (_req, res) => {
    res.json({ status: 'ok' });
  });
  // Ready means "admits new tasks here" (api/admission.ts). The public answer says only that; why,
  // and the region, epoch, mode and backlog, are on the operator listener's /readyz.
  mountRoute(app, '', systemRoutes.readyz, async (_req, res) => {
    const r = await ctx.admission.readiness();
    if (!r.ready) res.setHeader('Retry-After', '5');
    res.status(r.ready ? 200 : 503).json({ status: r.ready ? 'ready' : 'not_ready' });
  });
  // The servers named in the document are this deployment's, never the request's Host header.
  // Rendered once, on the first request.
  let document: ReturnType<typeof apiDocument> | null = null;
  mountRoute(app, '', systemRoutes.openapi, (_req, res) => {
    document ??= apiDocument(ctx.settings.publicBaseUrl);
    res.json(document);
  });

  // The console: a static page; everything it shows it reads through /v1 with a browser token.
  mountRoute(app, '', systemRoutes.console, (_req, res) => {
    res.setHeader('Content-Security-Policy', "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'");
    res.setHeader('Referrer-Policy', 'no-referrer');
    res.type('html').send(CONSOLE_HTML);
  });
  const tasks = taskHandlers(ctx);
  // CORS before anything else of /v1: a preflight carries no credential (api/auth.ts).
  app.use('/v1', corsForTokenRoutes(ctx.settings.browserTokens.corsOrigins));
  const v1 = express.Router();
  // A body is JSON or refused (415) before it is parsed; requests without a body pass.
  v1.use((req: Request, _res: Response, next: NextFunction) => {
    const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
    next(
      hasBody && !req.is(['application/json', 'application/*+json']) ? problems.unsupportedMediaType(req.get('content-type') ?? 'no Content-Type') : undefined,
    );
  });
  // A batch's body (up to 1,000 creates) has its own limit; the parser below skips a parsed body.
  v1.use('/tasks/batch', express.json({ limit: ctx.settings.batch.bodyLimit, strict: true, type: () => true }));
  v1.use(express.json({ limit: ctx.settings.bodyLimit, strict: true, type: () => true }));
  // A string Postgres cannot store (U+0000, a lone surrogate) is the tenant's bad input, refused
  // naming where it is, before any handler could send it to a statement (db/storable.ts).
  v1.use((req: Request, _res: Response, next: NextFunction) => {
    const inQuery = unstorableTextAt(req.query);
    const inBody = inQuery === null ? unstorableTextAt(req.body) : null;
    const field = inQuery ?? inBody;
    next(
      field === null
        ? undefined
        : problems.validation([{ field: field === '' ? '(body)' : field, message: 'contains U+0000 or an unpaired surrogate, which cannot be stored' }]),
    );
  });
  v1.use(readGate(ctx.admission));
  v1.use(requireTenant({ keys: ctx.keys, db: ctx.db, browserTokens: ctx.browserTokens }));
  mountRoute(v1, '/v1', taskRoutes.create, ctx.rateLimiter.middleware('create'), tasks.create);
  // Each item spends one create of the tenant's rate (api/batches.service.ts); the request itself one read.
  mountRoute(v1, '/v1', batchRoutes.create, ctx.rateLimiter.middleware('read'), batchHandlers(ctx).create);
  mountRoute(v1, '/v1', taskRoutes.list, ctx.rateLimiter.middleware('read'), tasks.list);
  mountRoute(v1, '/v1', taskRoutes.get, ctx.rateLimiter.middleware('read'), tasks.get);
  mountRoute(v1, '/v1', taskRoutes.cancel, ctx.rateLimiter.middleware('cancel'), tasks.cancel);
  mountRoute(v1, '/v1', taskRoutes.deleteOutput, ctx.rateLimiter.middleware('cancel'), tasks.deleteOutput);
  const models = modelHandlers(ctx);
  mountRoute(v1, '/v1', modelRoutes.list, ctx.rateLimiter.middleware('read'), models.list);
  // A quote is written: it spends the tenant's create budget.
  mountRoute(v1, '/v1', modelRoutes.quote, ctx.rateLimiter.middleware('create'), models.quote);
  mountRoute(v1, '/v1', budgetRoutes.get, ctx.rateLimiter.middleware('read'), budgetHandlers(ctx).get);
  const webhooks = webhookHandlers(ctx);
  const read = ctx.rateLimiter.middleware('read');
  const w = webhookEndpointRoutes;
  // Endpoint changes, rotations and redelivers are writes: they spend the tenant's create budget.
  const write = ctx.rateLimiter.middleware('create');
  mountRoute(v1, '/v1', w.create, write, webhooks.create);
  mountRoute(v1, '/v1', w.list, read, webhooks.list);
  mountRoute(v1, '/v1', w.get, read, webhooks.get);
  mountRoute(v1, '/v1', w.update, write, webhooks.update);
  mountRoute(v1, '/v1', w.remove, write, webhooks.remove);
  mountRoute(v1, '/v1', w.rotateSecret, write, webhooks.rotateSecret);
  mountRoute(v1, '/v1', w.deliveries, read, webhooks.deliveries);
  mountRoute(v1, '/v1', w.redeliver, write, webhooks.redeliver);
  mountRoute(v1, '/v1', usageRoutes.get, read, usageHandlers(ctx).get);
  // Live events (docs/events.md): text/event-stream, one read of the rate limit per stream opened.
  const events = eventHandlers(ctx);
  mountRoute(v1, '/v1', eventRoutes.task, read, events.task);
  mountRoute(v1, '/v1', eventRoutes.tenant, read, events.tenant);
  // Browser tokens: minted and revoked with the secret key only (docs/decisions/0077-browser-tokens.md).
  const tokens = tokenHandlers(ctx);
  mountRoute(v1, '/v1', tokenRoutes.mint, requireSecretKey, write, tokens.mint);
  mountRoute(v1, '/v1', tokenRoutes.revoke, requireSecretKey, write, tokens.revoke);
  app.use('/v1', v1);

  app.use((req, res) => sendProblem(res, problems.notFound(`route ${req.method} ${req.path}`)));
  app.use(errorHandler(ctx.logger));
  return app;
}
