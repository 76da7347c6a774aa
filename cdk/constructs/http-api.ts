import * as apigw from 'aws-cdk-lib/aws-apigatewayv2';
import { HttpLambdaIntegration } from 'aws-cdk-lib/aws-apigatewayv2-integrations';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { Construct } from 'constructs';
import { pascalCase } from './records.js';

/** API Gateway's HTTP API stops waiting for an integration after 30 seconds. */
const INTEGRATION_TIMEOUT_SECONDS = 30;

export interface HttpEntryProps {
  readonly apiName: string;
}

/** The HTTP API in front of the functions that declare an `http` trigger. */
export class HttpEntry extends Construct {
  readonly api: apigw.HttpApi;

  constructor(scope: Construct, id: string, props: HttpEntryProps) {
    super(scope, id);
    this.api = new apigw.HttpApi(this, 'Api', { apiName: props.apiName });
  }

  /** `/` takes every request (`$default`); any other base path takes itself and everything under it. */
  route(routeId: string, fn: lambda.Function, basePath: string, timeoutSeconds: number): void {
    if (timeoutSeconds > INTEGRATION_TIMEOUT_SECONDS) {
      throw new Error(
        `${routeId} answers HTTP but its timeout (${timeoutSeconds}s) exceeds the API's ${INTEGRATION_TIMEOUT_SECONDS}s`,
      );
    }
    const integration = new HttpLambdaIntegration(`${pascalCase(routeId)}Integration`, fn, {
      payloadFormatVersion: apigw.PayloadFormatVersion.VERSION_2_0,
    });
    const base = basePath.replace(/\/+$/, '');
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
}
