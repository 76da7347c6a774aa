import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { Duration, type RemovalPolicy } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { LogLevel, NodejsFunction, OutputFormat } from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import type { FunctionDecl, FunctionId } from '../../shared/base/topology.js';

/**
 * esbuild runs locally from the project's devDependency, never in Docker. ESM output needs a real
 * `require` for the CommonJS dependencies the bundle pulls in. The AWS SDK is bundled so the
 * functions run the versions pinned in the lockfile (and tested here), not the runtime's copy.
 */
const BUNDLING = {
  forceDockerBundling: false,
  format: OutputFormat.ESM,
  target: 'node22',
  mainFields: ['module', 'main'],
  banner: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
  minify: true,
  sourceMap: true,
  sourcesContent: false,
  bundleAwsSDK: true,
  // Warnings and errors only: a synth prints nothing per bundle when all is well.
  logLevel: LogLevel.WARNING,
} as const;

/**
 * Copies the declared asset directories beside the bundle (`<bundle dir>/<name>`), where the module
 * that reads them finds them by `new URL('./<name>/', import.meta.url)`, as it does in the source tree.
 */
function assetCopyHooks(functionId: FunctionId, projectRoot: string, directories: readonly string[]) {
  const names = directories.map((dir) => path.basename(dir));
  if (new Set(names).size !== names.length) {
    throw new Error(`Bundled assets of ${functionId} share a directory name: ${names.join(', ')}`);
  }
  for (const dir of directories) {
    if (!existsSync(path.join(projectRoot, dir))) {
      throw new Error(`Bundled asset directory ${dir} of ${functionId} does not exist`);
    }
  }
  const quote = (text: string) => `'${text.replace(/'/g, `'\\''`)}'`;
  return {
    beforeBundling: () => [],
    beforeInstall: () => [],
    afterBundling: (inputDir: string, outputDir: string) =>
      directories.map(
        (dir) =>
          `cp -R ${quote(path.join(inputDir, dir))} ${quote(path.join(outputDir, path.basename(dir)))}`,
      ),
  };
}

export interface TopologyFunctionProps {
  readonly functionId: FunctionId;
  readonly decl: FunctionDecl;
  /** Settings every function receives (`topology.settings`). */
  readonly settings: Readonly<Record<string, string>>;
  /** Repository root: `decl.entry` is relative to it and it holds the lockfile. */
  readonly projectRoot: string;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: RemovalPolicy;
  /** X-Ray active tracing (CDK then grants the role xray:PutTraceSegments and PutTelemetryRecords). */
  readonly tracing: boolean;
}

/**
 * A Node.js 22 arm64 Lambda bundled from its handler module, with its own log group and its own role.
 * The role starts empty (no AWS managed policy: AWSLambdaBasicExecutionRole would allow writing to
 * every log group) and may write only to this function's log group; the grants add the rest.
 */
export class TopologyFunction extends Construct {
  readonly function: NodejsFunction;
  readonly role: iam.Role;

  constructor(scope: Construct, id: string, props: TopologyFunctionProps) {
    super(scope, id);
    const { decl, projectRoot } = props;
    const logGroup = new logs.LogGroup(this, 'Logs', {
      retention: props.logRetention,
      removalPolicy: props.removalPolicy,
    });
    this.role = new iam.Role(this, 'ServiceRole', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `Execution role of the ${props.functionId} function`,
    });
    this.role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [logGroup.logGroupArn],
      }),
    );
    this.function = new NodejsFunction(this, 'Function', {
      entry: path.join(projectRoot, decl.entry),
      handler: 'handler',
      projectRoot,
      depsLockFilePath: path.join(projectRoot, 'package-lock.json'),
      description: decl.description,
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: decl.memoryMb,
      timeout: Duration.seconds(decl.timeoutSeconds),
      reservedConcurrentExecutions: decl.reservedConcurrency,
      logGroup,
      role: this.role,
      tracing: props.tracing ? lambda.Tracing.ACTIVE : lambda.Tracing.DISABLED,
      environment: {
        ...props.settings,
        POWERTOOLS_SERVICE_NAME: `tinker-serverless-${props.functionId}`,
        // Read by config() (shared/aws/tracer.ts): without active tracing there is no segment to fill.
        POWERTOOLS_TRACE_ENABLED: String(props.tracing),
        NODE_OPTIONS: '--enable-source-maps',
      },
      bundling: {
        ...BUNDLING,
        mainFields: [...BUNDLING.mainFields],
        ...(decl.bundledAssets === undefined || decl.bundledAssets.length === 0
          ? {}
          : { commandHooks: assetCopyHooks(props.functionId, projectRoot, decl.bundledAssets) }),
      },
    });
  }
}
