import { RemovalPolicy } from 'aws-cdk-lib';
import { AccessLogFormat } from 'aws-cdk-lib/aws-apigateway';
import * as apigw from 'aws-cdk-lib/aws-apigatewayv2';
import { HttpLambdaIntegration } from 'aws-cdk-lib/aws-apigatewayv2-integrations';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import type { HttpRouteDecl } from '../../shared/base/topology.js';
import { pascalCase } from './records.js';

/** API Gateway's HTTP API stops waiting for an integration after 30 seconds. */
const INTEGRATION_TIMEOUT_SECONDS = 30;

/**
 * One JSON line per request. Only what identifies and measures a request: no headers (the API key
 * travels in one), no query string, no body.
 */
// HTTP APIs take the REST API module's format type.
const ACCESS_LOG_FORMAT = AccessLogFormat.custom(
  JSON.stringify({
    requestId: '$context.requestId',
    ip: '$context.identity.sourceIp',
    requestTime: '$context.requestTimeEpoch',
    method: '$context.httpMethod',
    path: '$context.path',
    status: '$context.status',
    protocol: '$context.protocol',
    responseLength: '$context.responseLength',
    integrationLatency: '$context.integrationLatency',
    integrationError: '$context.integrationErrorMessage',
  }),
);

export interface HttpEntryProps {
  readonly apiName: string;
  /** Of the access log group (default one month). */
  readonly logRetention?: logs.RetentionDays;
  /** Of the access log group (default RETAIN). */
  readonly removalPolicy?: RemovalPolicy;
  /** The stage's default throttle: every route and client together, unless a route has its own. */
  readonly throttle: { readonly ratePerSecond: number; readonly burst: number };
}

/** The HTTP API in front of the functions that declare an `http` trigger, with access logs. */
export class HttpEntry extends Construct {
  readonly api: apigw.HttpApi;
  readonly accessLogs: logs.LogGroup;
  readonly stage: apigw.HttpStage;
  /** Per-route throttles, by route key (the stage's `RouteSettings`). */
  private readonly routeSettings: Record<
    string,
    { ThrottlingRateLimit: number; ThrottlingBurstLimit: number }
  > = {};

  constructor(scope: Construct, id: string, props: HttpEntryProps) {
    super(scope, id);
    this.accessLogs = new logs.LogGroup(this, 'AccessLogs', {
      retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
      removalPolicy: props.removalPolicy ?? RemovalPolicy.RETAIN,
    });
    this.api = new apigw.HttpApi(this, 'Api', { apiName: props.apiName, createDefaultStage: false });
    // The stage `createDefaultStage` would make, with access logging (it takes no logging options).
    this.stage = this.api.addStage('DefaultStage', {
      stageName: '$default',
      autoDeploy: true,
      throttle: { rateLimit: props.throttle.ratePerSecond, burstLimit: props.throttle.burst },
      accessLogSettings: {
        destination: new apigw.LogGroupLogDestination(this.accessLogs),
        format: ACCESS_LOG_FORMAT,
      },
    });
  }

  /**
   * `/` takes every request (`$default`); any other base path takes itself and everything under it.
   * Declared `routes` (under the base path) go to the same function with route keys of their own.
   */
  route(
    routeId: string,
    fn: lambda.Function,
    basePath: string,
    timeoutSeconds: number,
    routes: readonly HttpRouteDecl[] = [],
  ): void {
    if (timeoutSeconds > INTEGRATION_TIMEOUT_SECONDS) {
      throw new Error(
        `${routeId} answers HTTP but its timeout (${timeoutSeconds}s) exceeds the API's ${INTEGRATION_TIMEOUT_SECONDS}s`,
      );
    }
    const integration = new HttpLambdaIntegration(`${pascalCase(routeId)}Integration`, fn, {
      payloadFormatVersion: apigw.PayloadFormatVersion.VERSION_2_0,
    });
    const base = basePath.replace(/\/+$/, '');
    for (const decl of routes) {
      // The local runtime routes by base path alone: a route outside it would exist on AWS only.
      if (
        !decl.path.startsWith('/') ||
        (base !== '' && decl.path !== base && !decl.path.startsWith(`${base}/`))
      ) {
        throw new Error(
          `Route ${decl.method} ${decl.path} of ${routeId} is not under its base path ${basePath}`,
        );
      }
      this.addDeclaredRoute(routeId, decl, integration);
    }
    if (base === '') {
      new apigw.HttpRoute(this, `${pascalCase(routeId)}DefaultRoute`, {
        httpApi: this.api,
        routeKey: apigw.HttpRouteKey.DEFAULT,
        integration,
      });
      return;
    }
    this.api.addRoutes({ path: base, methods: [apigw.HttpMethod.ANY], integration });
    this.api.addRoutes({ path: `${base}/{proxy+}`, methods: [apigw.HttpMethod.ANY], integration });
  }

  private addDeclaredRoute(routeId: string, decl: HttpRouteDecl, integration: HttpLambdaIntegration): void {
    const routeKey = apigw.HttpRouteKey.with(decl.path, apigw.HttpMethod[decl.method]);
    const route = new apigw.HttpRoute(
      this,
      `${pascalCase(routeId)}${decl.method}${pascalCase(decl.path)}Route`,
      {
        httpApi: this.api,
        routeKey,
        integration,
      },
    );
    if (decl.throttle === undefined) return;
    this.routeSettings[routeKey.key] = {
      ThrottlingRateLimit: decl.throttle.ratePerSecond,
      ThrottlingBurstLimit: decl.throttle.burst,
    };
    (this.stage.node.defaultChild as apigw.CfnStage).routeSettings = { ...this.routeSettings };
    // CloudFormation refuses settings for a route key that does not exist yet.
    this.stage.node.addDependency(route);
  }
}
