// The HTTP API. createApp() wires routes to handlers; nothing here talks to Temporal except
// through the facade.
import express, { type NextFunction, type Request, type Response } from 'express';
import type { ApiContext } from './context';
import { readGate } from './admission';
import { requireTenant } from './auth';
import { callbackHandlers } from './callbacks.handlers';
import { openApiDocument } from './openapi';
import { errorHandler, problems, sendProblem } from './problem';
import { taskHandlers } from './tasks.handlers';

export function createApp(ctx: ApiContext): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);

  app.use((req: Request, res: Response, next: NextFunction) => {
    const end = ctx.metrics.httpDuration.startTimer({ method: req.method });
    res.on('finish', () => {
      const route = req.route?.path ? `${req.baseUrl}${String(req.route.path)}` : 'unmatched';
      end({ route });
      ctx.metrics.httpRequests.inc({ method: req.method, route, status: String(res.statusCode) });
    });
    next();
  });

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  // Ready means "admits new tasks here" (api/admission.ts). The public answer says only that; why,
  // and the region, epoch, mode and backlog, are on the operator listener's /readyz.
  app.get('/readyz', async (_req, res) => {
    const r = await ctx.admission.readiness();
    if (!r.ready) res.setHeader('Retry-After', '5');
    res.status(r.ready ? 200 : 503).json({ status: r.ready ? 'ready' : 'not_ready' });
  });
  // The servers named in the document are this deployment's, never the request's Host header.
  app.get('/openapi.json', (_req, res) => {
    res.json(openApiDocument(ctx.settings.publicBaseUrl));
  });

  const callbacks = callbackHandlers(ctx);
  app.post(
    '/v1/callbacks/:provider/:token',
    express.raw({ type: () => true, limit: ctx.settings.bodyLimit }),
    callbacks.receive,
  );

  const tasks = taskHandlers(ctx);
  const v1 = express.Router();
  // A body is JSON or refused (415) before it is parsed; requests without a body pass.
  v1.use((req: Request, _res: Response, next: NextFunction) => {
    const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
    next(hasBody && !req.is(['application/json', 'application/*+json']) ? problems.unsupportedMediaType(req.get('content-type') ?? 'no Content-Type') : undefined);
  });
  v1.use(express.json({ limit: ctx.settings.bodyLimit, strict: true, type: () => true }));
  v1.use(readGate(ctx.admission));
  v1.use(requireTenant(ctx.db));
  v1.post('/tasks', ctx.rateLimiter.middleware('create'), tasks.create);
  v1.get('/tasks', ctx.rateLimiter.middleware('read'), tasks.list);
  v1.get('/tasks/:id', ctx.rateLimiter.middleware('read'), tasks.get);
  v1.post('/tasks/:id/cancel', ctx.rateLimiter.middleware('cancel'), tasks.cancel);
  v1.delete('/tasks/:id/output', ctx.rateLimiter.middleware('cancel'), tasks.deleteOutput);
  app.use('/v1', v1);

  app.use((req, res) => sendProblem(res, problems.notFound(`route ${req.method} ${req.path}`)));
  app.use(errorHandler(ctx.logger));
  return app;
}
